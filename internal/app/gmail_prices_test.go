package app_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/google"
	"mailroom/store"
)

// fullSyncWire is an account's "fullSync" and "lastPushAt" as the API
// answers them.
type fullSyncWire struct {
	LastPushAt *string `json:"lastPushAt"`
	FullSync   *struct {
		MessagesListed       *int `json:"messagesListed"`
		MessagesRead         *int `json:"messagesRead"`
		UnitsLeft            *int `json:"unitsLeft"`
		EstimatedSecondsLeft *int `json:"estimatedSecondsLeft"`
	} `json:"fullSync"`
}

// A mailroom at Google's 2026 prices (the default) syncs a 2,000-message
// mailbox against an emulator that charges them at 6,000 units a minute
// per user and is never refused: its budget and Google count the same
// units. The minute is compressed to 3 s for both, so the sync's ~6
// minutes of quota take ~20 s. While it runs, the account's API answer
// shows the full sync's progress at those prices; a push then stamps
// lastPushAt.
func TestFullSyncAtThePriceListIsNeverRefused(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaWindow: window})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) { cfg.GmailQuotaWindow = window }))
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 1667) // 2,000 messages
	size := len(fake.Gmail.Messages(gmailAddr))
	acc := connectAccount(ta, fake, userID, gmailAddr)

	var seen fullSyncWire
	testkit.Eventually(t, 20*time.Second, "the full sync's progress in the API", func() bool {
		var v fullSyncWire
		ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &v)
		if v.FullSync != nil && *v.FullSync.MessagesRead > 0 {
			seen = v
			return true
		}
		return false
	})
	fs := seen.FullSync
	pr := google.MustPrices(google.Prices2026)
	left := size - *fs.MessagesRead
	if *fs.MessagesListed != size || *fs.UnitsLeft != left*pr.MessagesGet {
		t.Errorf("full sync %d listed, %d read, %d units left; want %d listed and %d units (20 a message left)",
			*fs.MessagesListed, *fs.MessagesRead, *fs.UnitsLeft, size, left*pr.MessagesGet)
	}
	// At 6,000 units a (3 s) window.
	if want := (*fs.UnitsLeft*3 + 6000 - 1) / 6000; *fs.EstimatedSecondsLeft != want {
		t.Errorf("estimatedSecondsLeft %d, want %d (%d units at 6,000 a 3 s window)", *fs.EstimatedSecondsLeft, want, *fs.UnitsLeft)
	}
	// The Accounts page says it in people's words.
	if status, body := getPage(t, adminClient(ta), ta.URL+"/admin/accounts"); status != http.StatusOK ||
		!regexp.MustCompile(`full sync: [0-9,]+ of 2,00[0-9] messages read, (about [0-9]+ (minute|minutes) left|under 2 minutes left)`).MatchString(body) {
		t.Errorf("the Accounts page (%d) does not show the full sync's progress", status)
	}
	if seen.LastPushAt == nil || *seen.LastPushAt != "" {
		t.Errorf("lastPushAt before any push = %v, want \"\"", seen.LastPushAt)
	}

	waitMirror(ta, fake, acc.ID, gmailAddr, 90*time.Second)
	if r := fake.Gmail.QuotaRefusals(gmailAddr); len(r) != 0 {
		t.Errorf("Google refused %v while a mailroom at its own prices synced", r)
	}
	var after fullSyncWire
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &after)
	if after.FullSync != nil {
		t.Errorf("fullSync after the sync = %+v, want null", after.FullSync)
	}
	// The metric an operator reads is what Google charged, within 1%.
	if spent, counted := scrapeMetrics(ta)["mailroom_gmail_quota_units_total"], float64(fake.Gmail.QuotaUnits(gmailAddr)); spent < counted || spent > counted*1.01 {
		t.Errorf("Google charged %v units, mailroom_gmail_quota_units_total says %v: want within 1%% and never under", counted, spent)
	}

	before := time.Now().Add(-time.Second)
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &after)
	at, err := time.Parse(time.RFC3339, *after.LastPushAt)
	if err != nil || at.Before(before.Truncate(time.Second)) || at.After(time.Now()) {
		t.Errorf("lastPushAt after a push = %q (%v), want the push's time", *after.LastPushAt, err)
	}
}

// A mailroom told the 2025 prices (15,000 units a minute, messages.get 5)
// whose project in fact pays 2026's (6,000, messages.get 20), as every
// mailroom did before the price lists, is refused by Google, and its
// budget, shrunk by the refusals, still brings the sync to the end with no
// dead letter. Both limits are a tenth of Google's (600 units a 1.5 s
// window for Google, 1,500 for the budget), so that a small mailbox meets
// them quickly.
func TestWrongPriceListIsRefusedAndRecovers(t *testing.T) {
	t.Parallel()
	const window = 1500 * time.Millisecond
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaWindow: window,
		GmailUserUnitsPerMinute: 6000 / 10})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.GmailQuotaWindow, cfg.GmailQuotaPrices, cfg.GmailUserUnits = window, google.Prices2025, 15000/10
	}))
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 100) // 120 messages: about 2,000 units at 2026's prices
	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 90*time.Second)
	if r := fake.Gmail.QuotaRefusals(gmailAddr)[googlefake.ReasonUserRateLimit]; r == 0 {
		t.Error("Google refused nothing: a budget at the wrong prices stayed under the limit")
	}
	var dead map[string]int
	if err := ta.DB().View(func(tx *store.Tx) (err error) { dead, err = tx.DeadLetterCounts(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Errorf("dead letters %v after Google's refusals", dead)
	}
}
