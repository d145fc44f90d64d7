package googlefake_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// quotaErr returns the *googleapi.Error of a refused call.
func quotaErr(t *testing.T, err error) *googleapi.Error {
	t.Helper()
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		t.Fatalf("error %v is not a *googleapi.Error", err)
	}
	if len(ge.Errors) != 1 {
		t.Fatalf("errors = %+v, want one item", ge.Errors)
	}
	return ge
}

// The per-user limit refuses with Google's 403 userRateLimitExceeded in
// the usageLimits domain and a "Retry after" time; a refused call costs
// nothing, and the window slides.
func TestGmailUserQuota(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, GmailUserUnitsPerMinute: 12})
	// history.list costs 2: six of them fill the 12 units.
	for i := range 6 {
		if _, err := e.gmail.Users.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		clk.Advance(5 * time.Second)
	}
	_, err := e.gmail.Users.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do()
	ge := quotaErr(t, err)
	if ge.Code != 403 || ge.Errors[0].Reason != "userRateLimitExceeded" || !strings.Contains(ge.Body, `"domain":"usageLimits"`) {
		t.Fatalf("refusal = %d %+v, want 403 userRateLimitExceeded in usageLimits", ge.Code, ge.Errors[0])
	}
	// The first call (at 12:00:00) leaves the window at 12:01:00.
	if want := "Retry after 2026-06-01T12:01:00.000Z"; !strings.Contains(ge.Message, want) {
		t.Errorf("message %q does not say %q", ge.Message, want)
	}
	if got := e.srv.Gmail.QuotaUnits(ann); got != 12 {
		t.Errorf("units = %d, want 12 (the refused call costs nothing)", got)
	}
	if got := e.srv.Gmail.QuotaRefusals(ann)[googlefake.ReasonUserRateLimit]; got != 1 {
		t.Errorf("refusals = %d, want 1", got)
	}
	// A labels.list (1 unit) does not fit either: the window is full.
	if _, err := e.gmail.Users.Labels.List("me").Do(); err == nil {
		t.Fatal("labels.list passed a full window")
	}
	// 12:00:30 + 30 s: the first call has left the window, two units are free.
	clk.Advance(30 * time.Second)
	if _, err := e.gmail.Users.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do(); err != nil {
		t.Fatalf("after the window slid: %v", err)
	}
	if _, err := e.gmail.Users.Labels.List("me").Do(); err == nil {
		t.Fatal("a 13th unit passed in one window")
	}
	u, ul, _, _ := e.srv.Gmail.QuotaWindow(ann)
	if u != 12 || ul != 12 {
		t.Errorf("window = %d of %d, want 12 of 12", u, ul)
	}
	by := e.srv.Gmail.QuotaUnitsByMethod(ann)
	if by[googlefake.MethodHistoryList] != 14 || len(by) != 1 {
		t.Errorf("units by method = %v, want history.list 14 only", by)
	}
}

// Every method costs what Google's table says (a method over the whole
// limit can never pass).
func TestGmailQuotaMethodCosts(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, GmailUserUnitsPerMinute: 99})
	_, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do() // 100 units
	if ge := quotaErr(t, err); ge.Code != 403 {
		t.Fatalf("watch over the limit: %d", ge.Code)
	}
	e.srv.Gmail.SetQuota(100, 0, 0, 0)
	if _, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do(); err != nil {
		t.Fatalf("watch at the limit: %v", err)
	}
	if got := e.srv.Gmail.QuotaUnitsByMethod(ann)[googlefake.MethodWatch]; got != 100 {
		t.Errorf("watch units = %d, want 100", got)
	}
}

// The project limit counts every user together and refuses with
// rateLimitExceeded.
func TestGmailProjectQuota(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, GmailUserUnitsPerMinute: 10, GmailProjectUnitsPerMinute: 15})
	bobRefresh := e.srv.AddAccount(bob)
	bg, _ := e.clients(t, bobRefresh)
	for range 2 {
		if _, err := e.gmail.Users.Messages.List("me").Do(); err != nil { // 5 each
			t.Fatal(err)
		}
	}
	if _, err := bg.Users.Messages.List("me").Do(); err != nil {
		t.Fatal(err)
	}
	_, err := bg.Users.Messages.List("me").Do()
	ge := quotaErr(t, err)
	if ge.Code != 403 || ge.Errors[0].Reason != "rateLimitExceeded" || !strings.Contains(ge.Body, `"domain":"usageLimits"`) {
		t.Fatalf("refusal = %d %+v, want 403 rateLimitExceeded in usageLimits", ge.Code, ge.Errors[0])
	}
	if e.srv.Gmail.TotalQuotaUnits() != 15 || e.srv.Gmail.QuotaRefusals(bob)[googlefake.ReasonRateLimit] != 1 {
		t.Errorf("units %d, bob's refusals %v", e.srv.Gmail.TotalQuotaUnits(), e.srv.Gmail.QuotaRefusals(bob))
	}
	_, _, p, pl := e.srv.Gmail.QuotaWindow(bob)
	if p != 15 || pl != 15 {
		t.Errorf("project window = %d of %d, want 15 of 15", p, pl)
	}
}

// More requests of one user in flight than allowed get 429 "Too many
// concurrent requests for user"; another user is not affected.
func TestGmailConcurrentRequests(t *testing.T) {
	e := newEnv(t, googlefake.Options{GmailMaxConcurrent: 2})
	bobRefresh := e.srv.AddAccount(bob)
	bg, _ := e.clients(t, bobRefresh)
	// Warm the token so the slow calls below are all in flight at once.
	if _, err := e.gmail.Users.GetProfile("me").Do(); err != nil {
		t.Fatal(err)
	}
	h, err := e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodGetProfile, Account: ann, Latency: 300 * time.Millisecond})
	check(t, err)
	defer h.Remove()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	started := make(chan struct{}, 3)
	for i := range 2 {
		wg.Go(func() {
			started <- struct{}{}
			_, errs[i] = e.gmail.Users.GetProfile("me").Do()
		})
	}
	<-started
	<-started
	testkit.Eventually(t, 5*time.Second, "two calls in flight", func() bool { return h.Fired() == 2 })
	_, errs[2] = e.gmail.Users.GetProfile("me").Do()
	if _, err := bg.Users.GetProfile("me").Do(); err != nil {
		t.Errorf("another user refused: %v", err)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("calls within the limit failed: %v, %v", errs[0], errs[1])
	}
	ge := quotaErr(t, errs[2])
	if ge.Code != 429 || ge.Message != "Too many concurrent requests for user" || !strings.Contains(ge.Body, `"domain":"usageLimits"`) {
		t.Fatalf("third call = %d %q %+v", ge.Code, ge.Message, ge.Errors[0])
	}
	if got := e.srv.Gmail.QuotaRefusals(ann)["concurrent"]; got != 1 {
		t.Errorf("concurrent refusals = %d, want 1", got)
	}
	if _, err := e.gmail.Users.GetProfile("me").Do(); err != nil {
		t.Errorf("after the calls returned: %v", err)
	}
}

// Negative limits turn the quota off.
func TestGmailQuotaUnlimited(t *testing.T) {
	e := newEnv(t, googlefake.Options{GmailUserUnitsPerMinute: -1, GmailProjectUnitsPerMinute: -1})
	for range 3 {
		if _, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do(); err != nil {
			t.Fatal(err)
		}
	}
	e.srv.Gmail.SetQuota(250, 0, 0, 0)
	if _, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do(); err == nil {
		t.Fatal("the 301st..400th unit passed a 250-unit limit")
	}
}

// PeakProjectUnits is the most units of all users in any one sliding
// window, exact whether or not a limit applies, and starts again at a
// counter reset.
func TestGmailPeakProjectUnits(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, GmailUserUnitsPerMinute: -1, GmailProjectUnitsPerMinute: -1})
	bg, _ := e.clients(t, e.srv.AddAccount(bob))
	list := func(g *gmail.Service) {
		t.Helper()
		if _, err := g.Users.Messages.List("me").Do(); err != nil { // 5 units
			t.Fatal(err)
		}
	}
	// 12:00:00 ann 5, 12:00:40 bob 5, 12:00:50 ann 5: 15 in one minute.
	list(e.gmail)
	clk.Advance(40 * time.Second)
	list(bg)
	clk.Advance(10 * time.Second)
	list(e.gmail)
	// 12:01:05: the first call left the window; 10 + 5 = 15 again, not 20.
	clk.Advance(15 * time.Second)
	list(bg)
	if got := e.srv.Gmail.PeakProjectUnits(); got != 15 {
		t.Errorf("peak = %d, want 15", got)
	}
	// 12:01:08: a fourth call within the window of the last three: 20.
	clk.Advance(3 * time.Second)
	list(e.gmail)
	if got := e.srv.Gmail.PeakProjectUnits(); got != 20 {
		t.Errorf("peak = %d, want 20", got)
	}
	e.srv.ResetCounters()
	if got := e.srv.Gmail.PeakProjectUnits(); got != 0 {
		t.Errorf("peak after a reset = %d, want 0", got)
	}
}

// Each shape of the per-user refusal (SetUserRefusal) is answered as
// Google words it (doc_gmail.go names the report each comes from), costs
// nothing, and is counted under userRateLimitExceeded; the default is the
// documented one.
func TestGmailUserRefusalShapes(t *testing.T) {
	type want struct {
		code         int
		status       string
		reason       string
		domain       string
		message      string // the message, with <at> for the retry time
		namesRetryAt bool
	}
	wants := map[googlefake.RefusalShape]want{
		googlefake.RefusalUserDocumented: {403, "PERMISSION_DENIED", "userRateLimitExceeded", "usageLimits",
			"User-rate limit exceeded.  Retry after <at>", true},
		googlefake.RefusalQueriesPerUser: {403, "PERMISSION_DENIED", "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of service 'gmail.googleapis.com' for consumer 'project_number:123456789012'.", false},
		googlefake.RefusalTotalQueryCost: {403, "PERMISSION_DENIED", "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Total Query Cost' and limit 'Units per minute per user' of service 'gmail.googleapis.com' for consumer 'project_number:123456789012'.", false},
		googlefake.RefusalUserRateRetry: {403, "PERMISSION_DENIED", "rateLimitExceeded", "usageLimits",
			"User-rate limit exceeded.  Retry after <at>", true},
		googlefake.RefusalResourceExhausted: {429, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "global",
			"Resource has been exhausted (e.g. check quota).", false},
	}
	if len(wants) != len(googlefake.UserRefusalShapes()) {
		t.Fatalf("the test covers %d shapes, the emulator has %d", len(wants), len(googlefake.UserRefusalShapes()))
	}
	for _, shape := range googlefake.UserRefusalShapes() {
		t.Run(string(shape), func(t *testing.T) {
			w := wants[shape]
			clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
			e := newEnv(t, googlefake.Options{Now: clk.Now, GmailUserUnitsPerMinute: 5})
			if shape != googlefake.RefusalUserDocumented {
				if err := e.srv.Gmail.SetUserRefusal(shape); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.gmail.Users.Messages.List("me").Do(); err != nil {
				t.Fatal(err)
			}
			clk.Advance(10 * time.Second)
			_, err := e.gmail.Users.Messages.List("me").Do()
			ge := quotaErr(t, err)
			msg := strings.ReplaceAll(w.message, "<at>", "2026-06-01T12:01:00.000Z")
			if ge.Code != w.code || ge.Errors[0].Reason != w.reason || ge.Message != msg || ge.Errors[0].Message != msg ||
				!strings.Contains(ge.Body, `"domain":"`+w.domain+`"`) || !strings.Contains(ge.Body, `"status":"`+w.status+`"`) {
				t.Fatalf("refusal = %d %+v %s, want %d %s in %s (%s): %q", ge.Code, ge.Errors[0], ge.Body, w.code, w.reason, w.domain, w.status, msg)
			}
			if got := e.srv.Gmail.QuotaUnits(ann); got != 5 {
				t.Errorf("units = %d, want 5 (the refused call costs nothing)", got)
			}
			if got := e.srv.Gmail.QuotaRefusals(ann); got[googlefake.ReasonUserRateLimit] != 1 || len(got) != 1 {
				t.Errorf("refusals = %v, want one of the user's limit", got)
			}
		})
	}
	e := newEnv(t, googlefake.Options{})
	if err := e.srv.Gmail.SetUserRefusal(googlefake.RefusalProject); err == nil {
		t.Error("the project's shape was taken for a user's refusal")
	}
}

// A fault answers with any refusal shape, naming the retry time it is
// given in the message where the shape does, and in Retry-After.
func TestFaultRefusalShapes(t *testing.T) {
	clk := newClock(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now})
	for _, shape := range googlefake.RefusalShapes() {
		h, err := e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodLabelsList, Account: ann, Refusal: shape,
			RetryAfter: 7 * time.Second, Times: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.gmail.Users.Labels.List("me").Do()
		ge := quotaErr(t, err)
		if h.Fired() != 1 || (ge.Code != 403 && ge.Code != 429) || ge.Errors[0].Reason == "" || ge.Header.Get("Retry-After") != "7" {
			t.Errorf("%s: %d %+v (Retry-After %q), want a quota refusal with Retry-After 7", shape, ge.Code, ge.Errors[0], ge.Header.Get("Retry-After"))
		}
		if strings.Contains(ge.Message, "Retry after") && !strings.Contains(ge.Message, "Retry after 2026-06-01T12:00:07.000Z") {
			t.Errorf("%s: message %q does not name the retry time 12:00:07", shape, ge.Message)
		}
	}
	if _, err := e.srv.InjectFault(googlefake.Fault{Refusal: "no-such-shape"}); err == nil {
		t.Error("an unknown shape was taken")
	}
	if _, err := e.srv.InjectFault(googlefake.Fault{Refusal: googlefake.RefusalProject, Code: 500}); err == nil {
		t.Error("a shape with a code of its own was taken")
	}
}

// Each price list has its limits (without options: the 2026 list, that
// of a project created since May 2026) and its per-method table, and
// every Gmail method costs what that table says, a messages.get by its
// format (the 2026 list's body read, format full, raw or html, costs 60:
// the stricter reading of Google's later page).
func TestGmailQuotaDefaultsAndTable(t *testing.T) {
	// developers.google.com/workspace/gmail/api/reference/quota, the May
	// 2026 revision and the table before it (see doc_gmail.go).
	for _, c := range []struct {
		prices    string
		userUnits int
		// get is messages.get with format metadata, getBody with full
		// (the format's default) and raw.
		get, getBody, trash, threads int
	}{
		{"", 6000, 20, 60, 20, 40},
		{googlefake.GmailPrices2026, 6000, 20, 60, 20, 40},
		{googlefake.GmailPrices2025, 15000, 5, 5, 5, 10},
	} {
		t.Run("prices="+c.prices, func(t *testing.T) {
			e := newEnv(t, googlefake.Options{GmailQuotaPrices: c.prices})
			if _, ul, _, pl := e.srv.Gmail.QuotaWindow(ann); ul != c.userUnits || pl != 1_200_000 {
				t.Fatalf("limits = %d per user, %d per project; want %d and 1,200,000", ul, pl, c.userUnits)
			}
			got := quotaTableUnits(t, e)
			want := map[string]int{
				googlefake.MethodGetProfile: 1, googlefake.MethodWatch: 100, googlefake.MethodStop: 50,
				googlefake.MethodMessagesList: 5, googlefake.MethodMessagesGet: c.get + 2*c.getBody,
				googlefake.MethodMessagesModify: 5, googlefake.MethodMessagesBatchModify: 50,
				googlefake.MethodMessagesTrash: c.trash, googlefake.MethodMessagesUntrash: 5,
				googlefake.MethodMessagesDelete: 10, googlefake.MethodHistoryList: 2, googlefake.MethodLabelsList: 1,
				googlefake.MethodLabelsGet: 1, googlefake.MethodLabelsCreate: 5, googlefake.MethodThreadsGet: c.threads,
			}
			for m, units := range want {
				if got[m] != units {
					t.Errorf("%s cost %d units, Google's table says %d", m, got[m], units)
				}
			}
		})
	}
}

// A price list changed at run time takes the next call, and a per-user
// limit left at its default follows the list's.
func TestGmailSetQuotaPrices(t *testing.T) {
	e := newEnv(t, googlefake.Options{})
	id, err := e.srv.Gmail.AddMessage(ann, googlefake.Message{From: "a@example.com", To: ann, Subject: "s", Body: "b"})
	check(t, err)
	if err := e.srv.Gmail.SetQuotaPrices("2024"); err == nil {
		t.Error("SetQuotaPrices took an unknown list")
	}
	check(t, e.srv.Gmail.SetQuotaPrices(googlefake.GmailPrices2025))
	_, err = e.gmail.Users.Messages.Get("me", id).Format("metadata").Do()
	check(t, err)
	if got := e.srv.Gmail.QuotaUnits(ann); got != 5 {
		t.Errorf("a messages.get at the 2025 prices cost %d units, want 5", got)
	}
	if _, ul, _, _ := e.srv.Gmail.QuotaWindow(ann); ul != 15000 || e.srv.Gmail.QuotaPrices() != googlefake.GmailPrices2025 {
		t.Errorf("per-user limit %d at %s prices, want 15,000 at 2025", ul, e.srv.Gmail.QuotaPrices())
	}
	e.srv.Gmail.SetQuota(300, 0, 0, 0)
	check(t, e.srv.Gmail.SetQuotaPrices(googlefake.GmailPrices2026))
	if _, ul, _, _ := e.srv.Gmail.QuotaWindow(ann); ul != 300 {
		t.Errorf("a per-user limit set (300) became %d with the price list", ul)
	}
}

// quotaTableUnits makes one call of each Gmail method (messages.get three
// times: formats metadata, full by default, and raw) and returns the units
// spent by method.
func quotaTableUnits(t *testing.T, e *env) map[string]int {
	t.Helper()
	id, err := e.srv.Gmail.AddMessage(ann, googlefake.Message{From: "a@example.com", To: ann, Subject: "s", Body: "b"})
	check(t, err)
	id2, err := e.srv.Gmail.AddMessage(ann, googlefake.Message{From: "a@example.com", To: ann, Subject: "t", Body: "c"})
	check(t, err)
	u := e.gmail.Users
	var thread string
	calls := []func() error{
		func() error { _, err := u.GetProfile("me").Do(); return err },
		func() error {
			_, err := u.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do()
			return err
		},
		func() error { return u.Stop("me").Do() },
		func() error { _, err := u.Messages.List("me").Do(); return err },
		func() error {
			m, err := u.Messages.Get("me", id).Format("metadata").Do()
			if err == nil {
				thread = m.ThreadId
			}
			return err
		},
		func() error { _, err := u.Messages.Get("me", id).Do(); return err },
		func() error { _, err := u.Messages.Get("me", id).Format("raw").Do(); return err },
		func() error { _, err := u.Threads.Get("me", thread).Format("metadata").Do(); return err },
		func() error {
			_, err := u.Messages.Modify("me", id, &gmail.ModifyMessageRequest{AddLabelIds: []string{"STARRED"}}).Do()
			return err
		},
		func() error {
			return u.Messages.BatchModify("me", &gmail.BatchModifyMessagesRequest{Ids: []string{id}, RemoveLabelIds: []string{"STARRED"}}).Do()
		},
		func() error { _, err := u.Messages.Trash("me", id).Do(); return err },
		func() error { _, err := u.Messages.Untrash("me", id).Do(); return err },
		func() error { return u.Messages.Delete("me", id2).Do() },
		func() error {
			_, err := u.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do()
			return err
		},
		func() error { _, err := u.Labels.List("me").Do(); return err },
		func() error { _, err := u.Labels.Get("me", "INBOX").Do(); return err },
		func() error { _, err := u.Labels.Create("me", &gmail.Label{Name: "Deploys"}).Do(); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	return e.srv.Gmail.QuotaUnitsByMethod(ann)
}
