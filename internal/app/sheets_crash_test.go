package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// crashFake is the Google emulator, in the test process, behind a handler
// that can kill the child exactly between a Sheets write and its
// bookkeeping: the write lands, then the child dies before it hears back.
type crashFake struct {
	*googlefake.Server
	url        string
	killer     atomic.Pointer[func()]
	growKiller atomic.Pointer[func()]
}

func newCrashFake(t *testing.T) *crashFake {
	t.Helper()
	f := &crashFake{Server: googlefake.New(googlefake.Options{})}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v4/spreadsheets/") && strings.HasSuffix(r.URL.Path, ":batchUpdate") && !strings.Contains(r.URL.Path, "/values") {
			if kill := f.growKiller.Swap(nil); kill != nil {
				f.Handler().ServeHTTP(httptest.NewRecorder(), r) // the grow lands
				(*kill)()                                        // kill -9 before the answer
				panic(http.ErrAbortHandler)
			}
		}
		if r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v4/spreadsheets/") {
			if kill := f.killer.Swap(nil); kill != nil {
				f.Handler().ServeHTTP(httptest.NewRecorder(), r) // the write lands
				(*kill)()                                        // kill -9 before the answer
				panic(http.ErrAbortHandler)
			}
		}
		f.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	f.url = hs.URL + "/"
	f.SetBaseURL(f.url)
	return f
}

// killOnNextWrite arms the handler: the next write that lands kills p.
func (f *crashFake) killOnNextWrite(p *proc) {
	kill := func() { kill9(p) }
	f.killer.Store(&kill)
}

// killOnNextGrow arms the handler: the next grid grow
// (spreadsheets.batchUpdate) that lands kills p.
func (f *crashFake) killOnNextGrow(p *proc) {
	kill := func() { kill9(p) }
	f.growKiller.Store(&kill)
}

// kill9 kills the child with SIGKILL and waits for it to be gone.
func kill9(p *proc) { p.Kill9() }

func (p *proc) json(method, path string, body any, want int, out any) error {
	p.t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, p.url+path, r)
	req.Header.Set("Authorization", "Bearer "+apptest.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (p *proc) must(method, path string, body any, want int, out any) {
	p.t.Helper()
	if err := p.json(method, path, body, want, out); err != nil {
		p.t.Fatal(err)
	}
}

func sheetsProc(t *testing.T, dir string, f *crashFake) *proc {
	t.Helper()
	return startProc(t, dir,
		"MAILROOM_GOOGLE_API_URL="+f.url, "MAILROOM_GOOGLE_TOKEN_URL="+f.url+"token",
		"MAILROOM_SHEETS_FLUSH_DELAY=300ms", "MAILROOM_SHEETS_FLUSH_THRESHOLD=50",
		"MAILROOM_SHEETS_WRITES_PER_MINUTE=1000", "MAILROOM_SHEETS_QUOTA_WINDOW=2s",
		"MAILROOM_DELAYED_CHECK_INTERVAL=100ms", "MAILROOM_RETRY_INITIAL=100ms", "MAILROOM_RETRY_MAX=500ms",
	)
}

// setupForm makes a user, connects the account and creates a form on a
// fresh spreadsheet.
func setupForm(t *testing.T, p *proc, f *crashFake) (formID, book string) {
	t.Helper()
	return setupFormGrid(t, p, f, 0)
}

// setupFormGrid is setupForm on a sheet of gridRows rows (0: Google's
// 1,000).
func setupFormGrid(t *testing.T, p *proc, f *crashFake, gridRows int) (formID, book string) {
	t.Helper()
	const email = "crash@example.com"
	book, err := f.Sheets.CreateSpreadsheet(email, "Crash survey")
	if err != nil {
		t.Fatal(err)
	}
	if gridRows > 0 {
		if err := f.Sheets.SetGridSize(book, "Sheet1", gridRows, 26); err != nil {
			t.Fatal(err)
		}
	}
	var u, a, form struct{ ID string }
	p.must(http.MethodPost, "/api/v1/users", map[string]string{"email": "owner-" + email, "name": "Owner"}, http.StatusCreated, &u)
	p.must(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": u.ID, "email": email, "refreshToken": f.AddAccount(email)}, http.StatusCreated, &a)
	p.must(http.MethodPost, "/api/v1/forms", map[string]any{"userId": u.ID, "accountId": a.ID, "spreadsheetId": book, "sheet": "Sheet1", "columns": []string{"n"}}, http.StatusCreated, &form)
	return form.ID, book
}

// submitter posts submissions from several goroutines and remembers which
// ones were accepted (202) and how many had an unknown outcome.
type submitter struct {
	mu       sync.Mutex
	accepted []string
	unknown  int
	next     atomic.Int64
}

// run posts up to n submissions (numbered on from the last run) with 16
// workers; a worker stops at its first error (the child died).
func (s *submitter) run(p *proc, formID string, n int) {
	var wg sync.WaitGroup
	end := s.next.Load() + int64(n)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := s.next.Add(1)
				if i > end {
					return
				}
				var got struct{ ID string }
				err := p.json(http.MethodPost, "/api/v1/forms/"+formID+"/submissions",
					map[string]any{"answers": map[string]string{"n": fmt.Sprint(i)}}, http.StatusAccepted, &got)
				s.mu.Lock()
				if err != nil {
					s.unknown++
					s.mu.Unlock()
					return
				}
				s.accepted = append(s.accepted, got.ID)
				s.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// checkSheet asserts the sheet holds every accepted submission exactly
// once, in submission (id) order, and that the form's bookkeeping agrees.
func checkSheet(t *testing.T, p *proc, f *crashFake, formID, book string, s *submitter) []string {
	t.Helper()
	var form sheetsForm
	testkit.Eventually(t, 60*time.Second, "the buffer to drain", func() bool {
		if err := p.json(http.MethodGet, "/api/v1/forms/"+formID, nil, http.StatusOK, &form); err != nil {
			return false
		}
		return form.Buffered == 0
	})
	rows, err := f.Sheets.Rows(book, "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	if form.RowsWritten != len(rows) {
		t.Fatalf("form says %d rows written, the sheet holds %d", form.RowsWritten, len(rows))
	}
	seen := map[string]bool{}
	var ids []string
	for i, r := range rows {
		if len(r) != 3 {
			t.Fatalf("row %d: %q", i+1, r)
		}
		id := r[2]
		if seen[id] {
			t.Fatalf("row %d: submission %s written twice", i+1, id)
		}
		if len(ids) > 0 && id < ids[len(ids)-1] {
			t.Fatalf("row %d: submission %s after %s: out of order", i+1, id, ids[len(ids)-1])
		}
		seen[id] = true
		ids = append(ids, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.accepted {
		if !seen[id] {
			t.Fatalf("accepted submission %s is not in the sheet", id)
		}
	}
	if extra := len(rows) - len(s.accepted); extra < 0 || extra > s.unknown {
		t.Fatalf("%d rows for %d accepted submissions and %d unknown outcomes", len(rows), len(s.accepted), s.unknown)
	}
	return ids
}

// TestSheetsCrashKill9MidBurst kills the built binary with SIGKILL in the
// middle of a burst of submissions and flushes, restarts it on the same
// data, and finds every accepted row in the sheet once, in order.
func TestSheetsCrashKill9MidBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	f := newCrashFake(t)
	dir := t.TempDir()
	p := sheetsProc(t, dir, f)
	formID, book := setupForm(t, p, f)

	s := &submitter{}
	done := make(chan struct{})
	go func() { defer close(done); s.run(p, formID, 3000) }()
	testkit.Eventually(t, 60*time.Second, "300 rows in the sheet", func() bool {
		rows, _ := f.Sheets.Rows(book, "Sheet1")
		return len(rows) >= 300
	})
	kill9(p)
	<-done
	rows, _ := f.Sheets.Rows(book, "Sheet1")
	s.mu.Lock()
	accepted := len(s.accepted)
	s.mu.Unlock()
	if accepted >= 3000 {
		t.Fatal("the burst ended before the kill; the test proves nothing")
	}
	t.Logf("killed with %d accepted, %d rows in the sheet, %d requests cut", accepted, len(rows), s.unknown)

	p = sheetsProc(t, dir, f)
	s.run(p, formID, 500)
	ids := checkSheet(t, p, f, formID, book, s)
	t.Logf("after restart: %d rows, every accepted one once and in order", len(ids))
}

// TestSheetsCrashBetweenWriteAndBookkeeping kills the binary exactly after
// a Sheets write landed and before mailroom heard back: after the restart
// the flush reads the range back, finds its rows and records them without
// writing again.
func TestSheetsCrashBetweenWriteAndBookkeeping(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	f := newCrashFake(t)
	dir := t.TempDir()
	p := sheetsProc(t, dir, f)
	formID, book := setupForm(t, p, f)

	f.killOnNextWrite(p)
	s := &submitter{}
	s.run(p, formID, 40) // under the threshold: one flush after the delay
	testkit.Eventually(t, 30*time.Second, "the child to die on its write", func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	})
	if f.killer.Load() != nil {
		t.Fatal("no write reached the emulator")
	}
	writes := f.Calls(googlefake.MethodValuesUpdate)
	reads := f.Calls(googlefake.MethodValuesGet)
	rows, _ := f.Sheets.Rows(book, "Sheet1")
	if len(rows) != 40 || writes != 1 {
		t.Fatalf("before the restart: %d rows, %d writes; want 40 rows in 1 write", len(rows), writes)
	}

	p = sheetsProc(t, dir, f)
	ids := checkSheet(t, p, f, formID, book, s)
	if len(ids) != 40 {
		t.Fatalf("%d rows after the restart, want 40", len(ids))
	}
	if w := f.Calls(googlefake.MethodValuesUpdate); w != writes {
		t.Fatalf("the write was made again after the restart (%d writes, want %d)", w, writes)
	}
	if r := f.Calls(googlefake.MethodValuesGet); r <= reads {
		t.Fatal("the restarted flush did not read the range back")
	}
	// And the pipeline carries on below.
	s.run(p, formID, 60)
	ids = checkSheet(t, p, f, formID, book, s)
	if len(ids) != 100 {
		t.Fatalf("%d rows, want 100", len(ids))
	}
	var form sheetsForm
	p.must(http.MethodGet, "/api/v1/forms/"+formID, nil, http.StatusOK, &form)
	if form.LastError != "" {
		t.Fatalf("last error %q", form.LastError)
	}
}

// TestSheetsCrashBetweenGrowAndWrite kills the binary exactly after the
// grow of a sheet's grid landed and before mailroom heard back: after the
// restart the flush reads the grid, finds it grown, does not grow it
// again, and writes every row once, in order.
func TestSheetsCrashBetweenGrowAndWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	f := newCrashFake(t)
	dir := t.TempDir()
	p := sheetsProc(t, dir, f)
	formID, book := setupFormGrid(t, p, f, 30)

	f.killOnNextGrow(p)
	s := &submitter{}
	s.run(p, formID, 40) // one flush of 40 rows: past the 30-row grid
	testkit.Eventually(t, 30*time.Second, "the child to die on its grow", func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	})
	if f.growKiller.Load() != nil {
		t.Fatal("no grow reached the emulator")
	}
	gridRows, _, _ := f.Sheets.GridSize(book, "Sheet1")
	if rows, _ := f.Sheets.Rows(book, "Sheet1"); len(rows) != 0 || gridRows != 40+1000 || f.Calls(googlefake.MethodValuesUpdate) != 0 {
		t.Fatalf("before the restart: %d rows, grid %d, %d writes; want the grow to 1,040 rows (40 plus the step) and no write", len(rows), gridRows, f.Calls(googlefake.MethodValuesUpdate))
	}

	p = sheetsProc(t, dir, f)
	ids := checkSheet(t, p, f, formID, book, s)
	if len(ids) != 40 {
		t.Fatalf("%d rows after the restart, want 40", len(ids))
	}
	if g := f.Sheets.Stats().GridGrows; g != 1 {
		t.Fatalf("%d grows landed, want 1 (the restart must read the grid, not grow it again)", g)
	}
	if r, _, _ := f.Sheets.GridSize(book, "Sheet1"); r != gridRows {
		t.Fatalf("grid %d rows after the restart, want %d", r, gridRows)
	}
}
