package googlefake_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/sheets/v4"

	"mailroom/internal/googlefake"
)

func TestFaultNextCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{Subject: "x"}))
	h := must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{
		Method: googlefake.MethodMessagesGet, Code: 503, Times: 2, RetryAfter: 1500 * time.Millisecond,
	}))
	for i := range 2 {
		_, err := e.gmail.Users.Messages.Get("me", id).Do()
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != 503 || gerr.Header.Get("Retry-After") != "2" {
			t.Fatalf("call %d: %v, want 503 with Retry-After 2", i+1, err)
		}
	}
	_, err := e.gmail.Users.Messages.Get("me", id).Do()
	check(t, err)
	// Other methods are untouched.
	_, err = e.gmail.Users.GetProfile("me").Do()
	check(t, err)
	if h.Fired() != 2 {
		t.Errorf("fired = %d, want 2", h.Fired())
	}
}

func TestFaultRateLimit403(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	h := must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodHistoryList, Code: 403}))
	for range 3 {
		_, err := e.gmail.Users.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do()
		if code, reason := apiCode(t, err); code != 403 || reason != "rateLimitExceeded" {
			t.Fatalf("%d %s, want 403 rateLimitExceeded", code, reason)
		}
	}
	h.Remove()
	_, err := e.gmail.Users.History.List("me").StartHistoryId(e.srv.Gmail.HistoryID(ann)).Do()
	check(t, err)
}

func TestFaultPerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	ids := must[[]string](t)(e.srv.Gmail.Generate(ann, 4, 3))
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{MessageID: ids[1], Code: 404}))
	for i, id := range ids {
		_, err := e.gmail.Users.Messages.Get("me", id).Do()
		if (i == 1) != (err != nil) {
			t.Errorf("message %d: %v", i, err)
		}
	}
	before := e.srv.Gmail.HistoryID(ann)
	err := e.gmail.Users.Messages.BatchModify("me", &gmail.BatchModifyMessagesRequest{Ids: ids, AddLabelIds: []string{"STARRED"}}).Do()
	if code, _ := apiCode(t, err); code != 404 {
		t.Errorf("batchModify naming the message: %d, want 404", code)
	}
	if snap, _ := e.srv.Gmail.Message(ann, ids[0]); e.srv.Gmail.HistoryID(ann) != before || contains(snap.LabelIDs, "STARRED") {
		t.Error("a fault before the write must not apply it")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodGetProfile, Latency: 80 * time.Millisecond, Times: 1}))
	start := time.Now()
	_, err := e.gmail.Users.GetProfile("me").Do()
	check(t, err)
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("call took %v, want at least 80ms", d)
	}
}

func TestFaultAfterWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Exactly once"))
	appendRow := func(v string) error {
		_, err := e.sheets.Spreadsheets.Values.Append(id, "Sheet1!A1:Z", &sheets.ValueRange{Values: [][]any{row(v)}}).
			ValueInputOption("RAW").Do()
		return err
	}
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{
		Method: googlefake.MethodValuesAppend, Code: 500, AfterWrite: true, Times: 1,
	}))
	if code, _ := apiCode(t, appendRow("lost answer")); code != 500 {
		t.Fatalf("want 500, got %d", code)
	}
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{
		Method: googlefake.MethodValuesAppend, Drop: true, AfterWrite: true, Times: 1,
	}))
	err := appendRow("cut connection")
	var gerr *googleapi.Error
	if err == nil || errors.As(err, &gerr) {
		t.Fatalf("dropped connection: %v, want a transport error", err)
	}
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{
		Method: googlefake.MethodValuesAppend, Drop: true, Times: 1,
	}))
	if err := appendRow("never written"); err == nil {
		t.Fatal("dropped connection before the write: no error")
	}
	check(t, appendRow("fine"))
	rows := must[[][]string](t)(e.srv.Sheets.Rows(id, "Sheet1"))
	want := [][]string{{"lost answer"}, {"cut connection"}, {"fine"}}
	if len(rows) != len(want) || rows[0][0] != want[0][0] || rows[1][0] != want[1][0] || rows[2][0] != want[2][0] {
		t.Errorf("rows = %v, want %v", rows, want)
	}
}

func TestFaultProbability(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{Seed: 99})
	h := must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodLabelsList, Code: 500, Probability: 0.3}))
	failed := 0
	for range 200 {
		if _, err := e.gmail.Users.Labels.List("me").Do(); err != nil {
			failed++
		}
	}
	if failed < 30 || failed > 90 || h.Fired() != failed {
		t.Errorf("%d of 200 failed (fired %d), want about 60", failed, h.Fired())
	}
}

func TestFaultTokenEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	must[*googlefake.FaultHandle](t)(e.srv.InjectFault(googlefake.Fault{Method: googlefake.MethodToken, Code: 503}))
	_, err := e.gmail.Users.GetProfile("me").Do()
	var rerr *oauth2.RetrieveError
	if !errors.As(err, &rerr) || rerr.Response.StatusCode != 503 {
		t.Fatalf("%v, want a 503 RetrieveError", err)
	}
	e.srv.ClearFaults()
	_, err = e.gmail.Users.GetProfile("me").Do()
	check(t, err)
}

func TestInjectFaultValidates(t *testing.T) {
	t.Parallel()
	srv := googlefake.New(googlefake.Options{})
	defer srv.Close()
	for _, f := range []googlefake.Fault{
		{Method: "gmail.messages.gett", Code: 500},
		{Code: 200},
		{Method: googlefake.MethodMessagesGet},
		{Code: 500, Probability: 2},
		{Code: 500, Times: -1},
	} {
		if _, err := srv.InjectFault(f); err == nil {
			t.Errorf("InjectFault(%+v) accepted", f)
		}
	}
}
