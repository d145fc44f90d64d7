package googlefake_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/googlefake"
)

// TestThreadsGet: users.threads.get through the official client answers
// the thread's messages oldest first, in the format asked for (metadata
// with only the metadataHeaders asked for, minimal without a payload,
// full with the body), costs 10 units a call, refuses raw (not in its
// Format enum) with 400 and an unknown or emptied thread with 404.
func TestThreadsGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	first := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{From: "x@example.com", To: ann, Subject: "one", Body: "hello there"}))
	second := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{ThreadID: first, From: ann, To: "x@example.com", Subject: "Re: one", Body: "and back"}))
	lone := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{Subject: "two"}))
	threadID := e.srv.Gmail.Messages(ann)[0].ThreadID

	th, err := e.gmail.Users.Threads.Get("me", threadID).Format("metadata").MetadataHeaders("From", "Subject").Do()
	check(t, err)
	var ids []string
	for _, m := range th.Messages {
		ids = append(ids, m.Id)
		if m.ThreadId != threadID || m.HistoryId == 0 || len(m.LabelIds) == 0 || m.Payload == nil {
			t.Errorf("message %+v: want its thread id, history id, labels and payload", m)
			continue
		}
		var names []string
		for _, h := range m.Payload.Headers {
			names = append(names, h.Name)
		}
		if diff := cmp.Diff([]string{"From", "Subject"}, names); diff != "" {
			t.Errorf("message %s headers (-want +got):\n%s", m.Id, diff)
		}
		if m.Payload.Body != nil {
			t.Errorf("message %s: format metadata answered a body", m.Id)
		}
	}
	if diff := cmp.Diff([]string{first, second}, ids); diff != "" {
		t.Fatalf("thread messages (-want +got):\n%s", diff)
	}
	if want := th.Messages[1].HistoryId; th.HistoryId != want || th.Id != threadID {
		t.Errorf("thread %s history %d, want %s and %d (its last change)", th.Id, th.HistoryId, threadID, want)
	}

	min, err := e.gmail.Users.Threads.Get("me", threadID).Format("minimal").Do()
	check(t, err)
	if len(min.Messages) != 2 || min.Messages[0].Payload != nil {
		t.Errorf("format minimal: %d messages, payload %v; want 2 without payload", len(min.Messages), min.Messages[0].Payload)
	}
	full, err := e.gmail.Users.Threads.Get("me", threadID).Do() // format full by default
	check(t, err)
	if p := full.Messages[0].Payload; p == nil || p.Body == nil || p.Body.Data == "" || len(p.Headers) < 5 {
		t.Errorf("format full: payload %+v, want every header and the body", p)
	}

	_, err = e.gmail.Users.Threads.Get("me", threadID).Format("raw").Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("format raw: code %d, want 400", code)
	}
	_, err = e.gmail.Users.Threads.Get("me", "ffffffffffffffff").Do()
	if code, _ := apiCode(t, err); code != 404 {
		t.Errorf("unknown thread: code %d, want 404", code)
	}
	check(t, e.srv.Gmail.Delete(ann, lone))
	_, err = e.gmail.Users.Threads.Get("me", lone).Do()
	if code, _ := apiCode(t, err); code != 404 {
		t.Errorf("thread of a deleted message: code %d, want 404", code)
	}
	// Each call costs 40 units at the default (2026) prices
	// (reference/quota), the 400 and the 404s too: Google counts a call
	// that reached the method, as the emulator counts every call it
	// admitted.
	if got := e.srv.Gmail.QuotaUnitsByMethod(ann)[googlefake.MethodThreadsGet]; got != 240 {
		t.Errorf("threads.get units = %d, want 240 (40 a call)", got)
	}
	if got := e.srv.Calls(googlefake.MethodThreadsGet); got != 6 {
		t.Errorf("threads.get calls = %d, want 6", got)
	}
}
