package web

import (
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/queue/broker/brokertest"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// submitAll posts n small submissions through the handler, spread over
// forms in turn, from 256 clients at once (a commit carries as many, so the disk's sync is paid once for each of them), and returns how many were
// answered each status.
func submitAll(t *testing.T, se *secEnv, token string, forms []string, n int) map[int]int {
	t.Helper()
	var (
		next   atomic.Int64
		mu     sync.Mutex
		counts = map[int]int{}
		wg     sync.WaitGroup
	)
	for range 256 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				body := fmt.Sprintf(`{"answers":{"name":"n%d","email":"someone-%d@example.com"}}`, i, i)
				// Straight to the handler: request's check of each answer
				// against the API description would take most of the time
				// (the refusals' shape is checked in TestSubmissionBounds).
				req := httptest.NewRequest("POST", "/api/v1/forms/"+forms[i%int64(len(forms))]+"/submissions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+token)
				w := httptest.NewRecorder()
				se.h.ServeHTTP(w, req)
				mu.Lock()
				counts[w.Code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return counts
}

// waiting is the rows the forms keep buffered or have written.
func waiting(t *testing.T, db *store.DB, forms []string) int {
	t.Helper()
	n := 0
	err := db.View(func(tx *store.Tx) error {
		for _, id := range forms {
			w, err := tx.SheetWrites(id)
			if err != nil {
				return err
			}
			n += w.Buffered + w.RowsWritten
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSubmissionBurstsWithDefaults: with the default limits, a burst of
// 5,000 submissions to one form and one of 20,000 over the 24 forms of
// one user, each within seconds, are all accepted and all kept (issue 31:
// 600 a form and 1,200 a user a minute refused most of such a burst).
func TestSubmissionBurstsWithDefaults(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	if got := submitAll(t, se, se.alice.token, []string{se.alice.form}, 5000); got[202] != 5000 {
		t.Fatalf("5,000 submissions to one form: answers %v, want all 202", got)
	}
	if n := waiting(t, se.db, []string{se.alice.form}); n != 5000 {
		t.Fatalf("the form keeps %d rows, want the 5,000 accepted", n)
	}

	forms := []string{se.bob.form}
	err := se.db.Update(func(tx *store.Tx) error {
		for i := range 23 {
			f, err := tx.FormCreate(store.Form{UserID: se.bob.user, AccountID: se.bob.account, SpreadsheetID: "sheet-bob-" + strconv.Itoa(i), Sheet: "Sheet1", Columns: []string{"name", "email"}})
			if err != nil {
				return err
			}
			forms = append(forms, f.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := submitAll(t, se, se.bob.token, forms, 20000); got[202] != 20000 {
		t.Fatalf("20,000 submissions over one user's 24 forms: answers %v, want all 202", got)
	}
	if n := waiting(t, se.db, forms); n != 20000 {
		t.Fatalf("the forms keep %d rows, want the 20,000 accepted", n)
	}
}

// TestSubmissionBounds: each refusal of the submission bounds is in the
// contract's shape and names what is full: a form's allowance or backlog
// names the form (id), its user's allowance or bytes the user (userId);
// the 429s say when to retry.
func TestSubmissionBounds(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, func(d *Deps) {
		b := brokertest.Embedded(t)
		sp, err := sheets.New(sheets.Config{SubmitsPerForm: 2, SubmitsPerUser: 3, MaxWaiting: 100, MaxUserBytes: 1 << 20, FlushDelay: time.Hour},
			sheets.Deps{DB: d.DB, Queue: d.Queue, Broker: b.Client(), Clients: noSheets{}})
		if err != nil {
			t.Fatal(err)
		}
		d.Forms = sp
	})
	second := "" // another form of alice's
	if err := se.db.Update(func(tx *store.Tx) error {
		f, err := tx.FormCreate(store.Form{UserID: se.alice.user, AccountID: se.alice.account, SpreadsheetID: "sheet-alice-2", Sheet: "Sheet1", Columns: []string{"name", "email"}})
		second = f.ID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	submit := func(form string) *httptest.ResponseRecorder {
		return request(t, se.h, "POST", "/api/v1/forms/"+form+"/submissions", `{"answers":{"name":"x"}}`, bearer(se.alice.token))
	}
	refused := func(w *httptest.ResponseRecorder, status int, code, field string) {
		t.Helper()
		if e := apiError(t, w); w.Code != status || e.Code != code || e.Field != field {
			t.Fatalf("answer %d %+v, want %d %s naming %s", w.Code, e, status, code, field)
		}
		if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); status == 429 && (err != nil || ra < 1) {
			t.Fatalf("Retry-After %q, want whole seconds", w.Header().Get("Retry-After"))
		}
	}
	for range 2 {
		if w := submit(se.alice.form); w.Code != 202 {
			t.Fatalf("submission: %d %s", w.Code, w.Body)
		}
	}
	refused(submit(se.alice.form), 429, "rate_limited", "id")
	if w := submit(second); w.Code != 202 {
		t.Fatalf("alice's other form: %d %s", w.Code, w.Body)
	}
	refused(submit(second), 429, "rate_limited", "userId")
}

// TestSubmissionBytesAndBacklogBounds: past its bytes a user is refused 429
// naming userId, and a form with its most rows waiting 409 naming id; the
// rows accepted before stay.
func TestSubmissionBytesAndBacklogBounds(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, func(d *Deps) {
		b := brokertest.Embedded(t)
		sp, err := sheets.New(sheets.Config{MaxWaiting: 2, MaxUserBytes: 300, FlushDelay: time.Hour},
			sheets.Deps{DB: d.DB, Queue: d.Queue, Broker: b.Client(), Clients: noSheets{}})
		if err != nil {
			t.Fatal(err)
		}
		d.Forms = sp
	})
	submit := func(tn tenant, answer string) *httptest.ResponseRecorder {
		return request(t, se.h, "POST", "/api/v1/forms/"+tn.form+"/submissions", `{"answers":{"name":"`+answer+`"}}`, bearer(tn.token))
	}
	for range 2 {
		if w := submit(se.alice, "x"); w.Code != 202 {
			t.Fatalf("submission: %d %s", w.Code, w.Body)
		}
	}
	w := submit(se.alice, "x")
	if e := apiError(t, w); w.Code != 409 || e.Code != "form_backlog_full" || e.Field != "id" {
		t.Fatalf("a 3rd waiting row: %d %+v, want 409 form_backlog_full naming id", w.Code, e)
	}
	// Bob's one submission of 300 bytes reaches his bound.
	if w := submit(se.bob, strings.Repeat("b", 300)); w.Code != 202 {
		t.Fatalf("bob's first submission: %d %s", w.Code, w.Body)
	}
	w = submit(se.bob, "y")
	if e := apiError(t, w); w.Code != 429 || e.Code != "rate_limited" || e.Field != "userId" || w.Header().Get("Retry-After") == "" {
		t.Fatalf("past bob's bytes: %d %+v (Retry-After %q), want 429 rate_limited naming userId", w.Code, e, w.Header().Get("Retry-After"))
	}
	if n := waiting(t, se.db, []string{se.alice.form, se.bob.form}); n != 3 {
		t.Fatalf("the forms keep %d rows, want the 3 accepted", n)
	}
}
