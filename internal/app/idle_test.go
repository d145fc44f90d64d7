package app_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
)

// TestFirstPushAfterIdleIsAppliedWithinASecond: after a long idle spell
// (compressed: the task servers' linger is a setting, and nothing else of
// the sleep is timed), every queue's task server sleeps, and the first push
// still reaches the mirror within a second: the push's sync and its read
// event each wake their queue's server as the relay hands them over. The
// app runs with serve's default poll and delayed-check intervals.
func TestFirstPushAfterIdleIsAppliedWithinASecond(t *testing.T) {
	t.Parallel()
	for _, broker := range []string{"embedded", "redis"} {
		t.Run(broker, func(t *testing.T) {
			t.Parallel()
			redisURL := ""
			if broker == "redis" {
				redisURL = brokertest.RedisServer(t)
			}
			fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
			ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
				cfg.RedisURL = redisURL
				cfg.TaskPollInterval, cfg.DelayedCheckInterval = 100*time.Millisecond, time.Second // serve's defaults
				cfg.TaskServerLinger = 200 * time.Millisecond
			}))
			fake.AddAccount(gmailAddr)
			if _, err := fake.Gmail.Generate(gmailAddr, 20, 7); err != nil {
				t.Fatal(err)
			}
			acc := connectAccount(ta, fake, createUser(ta, "owner@example.com"), gmailAddr)
			waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)

			var unread []string
			for _, m := range fake.Gmail.Messages(gmailAddr) {
				if m.Unread() {
					unread = append(unread, m.ID)
				}
			}
			if len(unread) < 3 {
				t.Fatalf("the generated mailbox has %d unread messages, want 3", len(unread))
			}
			for round, id := range unread[:3] {
				testkit.Eventually(t, 10*time.Second, "every task server to sleep", func() bool { return len(ta.Queue().AwakeServers()) == 0 })
				// The idle spell: nothing runs, nothing wakes.
				time.Sleep(2 * time.Second)
				if awake := ta.Queue().AwakeServers(); len(awake) != 0 {
					t.Fatalf("round %d: servers %v woke while idle", round, awake)
				}
				if err := fake.Gmail.MarkRead(gmailAddr, id); err != nil {
					t.Fatal(err)
				}
				sent := time.Now()
				if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
					t.Fatalf("push: %d", st)
				}
				testkit.Eventually(t, 5*time.Second, fmt.Sprintf("round %d: the read to be applied after the push", round), func() bool {
					var m gmailTestMessage
					ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID+"/messages/"+id, nil, http.StatusOK, &m)
					return !m.Unread
				})
				took := time.Since(sent)
				t.Logf("round %d: push to applied after idle: %s", round, took)
				if took > time.Second {
					t.Errorf("round %d: the first push after idle was applied after %s, want within 1s", round, took)
				}
			}
		})
	}
}
