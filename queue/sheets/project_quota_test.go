package sheets

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// TestQuotaProjectTenAccounts: 40 forms on 10 accounts, a burst on every
// form at once. mailroom's own plan never goes over any quota (the
// emulator, as strict as Google, refuses nothing and counts no window over
// a limit), every row lands once and in order (the grids grow on the way:
// reads and writes both spent), and the accounts share the project fairly:
// the slowest account's p99 latency is within 2x the fastest's. The
// project's budget binds (10 accounts x the per-account limit > the
// project's). Twice: with Google's quotas scaled down (a "minute" of 1s, 6
// writes and 6 reads per account, 30 per project: the 60/300 ratio), and
// with Google's own numbers (60 and 300 in a "minute" of 10s: long enough
// that mailroom, on a busy 2-core machine, makes more than 300 writes in
// one, so the project's budget binds).
func TestQuotaProjectTenAccounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                                       string
		perAccount, perProject, threshold, rowsPer int
		window                                     time.Duration
	}{
		// 40 forms x 3 writes (and a grow) = 160 writes > 30 a window.
		{"scaled 6 and 30", 6, 30, 10, 30, time.Second},
		// 40 forms x 12 writes (and a grow) = 520 writes > 300 a window.
		{"Google's 60 and 300", 60, 300, 5, 60, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			projectTenAccounts(t, tc.perAccount, tc.perProject, tc.threshold, tc.rowsPer, tc.window)
		})
	}
}

func projectTenAccounts(t *testing.T, perAccount, perProject, threshold, rowsPer int, window time.Duration) {
	const accounts, formsPer = 10, 4
	e := newEnv(t, envOptions{
		cfg: Config{FlushDelay: 200 * time.Millisecond, Threshold: threshold, GrowStep: rowsPer, QuotaWindow: window,
			WritesPerMinute: perAccount, ReadsPerMinute: perAccount, ProjectWritesPerMinute: perProject, ProjectReadsPerMinute: perProject},
		fakeLimit: perAccount, fakeWindow: window,
		fake: googlefake.Options{SheetsReadLimit: perAccount, SheetsProjectWriteLimit: perProject, SheetsProjectReadLimit: perProject, SheetsGridRows: rowsPer / 2},
	})
	var (
		forms   []FormView
		emails  []string
		acctOf  = map[string]int{} // spreadsheet id -> account index
		formOf  = map[string]int{} // spreadsheet id -> form index
		written = make([][]time.Time, accounts*formsPer)
		mu      sync.Mutex
	)
	for a := range accounts {
		acct := e.account(fmt.Sprintf("acct%d@example.com", a))
		emails = append(emails, acct.Email)
		for range formsPer {
			f := e.form(acct, "q")
			acctOf[f.SpreadsheetID], formOf[f.SpreadsheetID] = a, len(forms)
			forms = append(forms, f)
		}
	}
	e.fake.ResetCounters() // the setup's reads are not part of the burst
	e.clients.mu.Lock()
	e.clients.onWrite = func(id string, n int) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		i := formOf[id]
		for range n {
			written[i] = append(written[i], now)
		}
	}
	e.clients.mu.Unlock()

	start := time.Now()
	subs := make([][]store.Submission, len(forms))
	var wg sync.WaitGroup
	for i, f := range forms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subs[i] = e.submitN(f.ID, "r", rowsPer)
		}()
	}
	wg.Wait()
	testkit.Eventually(t, 90*time.Second, "every row written", func() bool {
		for _, f := range forms {
			if e.formView(f.ID).RowsWritten != rowsPer {
				return false
			}
		}
		return true
	})
	t.Logf("%d rows on %d forms of %d accounts written in %s", accounts*formsPer*rowsPer, len(forms), accounts, time.Since(start))
	for i, f := range forms {
		checkOnceInOrder(t, subs[i], e.sheetRows(f.SpreadsheetID, f.Sheet))
	}

	st := e.fake.Sheets.Stats()
	if st.RejectedWrites != 0 || st.RejectedReads != 0 {
		t.Errorf("Google refused %d writes and %d reads: mailroom's plan went over a quota", st.RejectedWrites, st.RejectedReads)
	}
	t.Logf("the project's busiest window: %d writes and %d reads (limit %d)", st.ProjectMaxWritesInWindow, st.ProjectMaxReadsInWindow, perProject)
	if st.ProjectMaxWritesInWindow > perProject || st.ProjectMaxReadsInWindow > perProject {
		t.Errorf("the project made %d writes and %d reads within one window (limit %d)", st.ProjectMaxWritesInWindow, st.ProjectMaxReadsInWindow, perProject)
	}
	for _, m := range emails {
		if w, r := e.fake.Sheets.MaxWritesInWindow(m), e.fake.Sheets.MaxReadsInWindow(m); w > perAccount || r > perAccount {
			t.Errorf("account %s made %d writes and %d reads within one window (limit %d)", m, w, r, perAccount)
		}
	}
	if st.GridGrows != len(forms) || st.ReadCalls < len(forms) {
		t.Errorf("%d grows and %d reads; want one grow (after one grid read) per form", st.GridGrows, st.ReadCalls)
	}
	// The project's pace spaces its calls window/perProject apart, and a
	// turn its caller is slow to take (a busy machine) is not made up, so
	// the busiest window may fall a little short of the budget it presses.
	if st.ProjectMaxWritesInWindow < perProject-max(5, perProject/10) {
		t.Errorf("the project's busiest window held %d writes: the test never pressed on its budget of %d", st.ProjectMaxWritesInWindow, perProject)
	}

	// Fairness: p99 of each account's row latencies (submission to the
	// write that carried the row).
	p99 := make([]time.Duration, accounts)
	for a := range accounts {
		var lat []time.Duration
		for i, f := range forms {
			if acctOf[f.SpreadsheetID] != a {
				continue
			}
			s := slices.Clone(subs[i])
			slices.SortFunc(s, func(x, y store.Submission) int { return x.SubmittedAt.Compare(y.SubmittedAt) })
			mu.Lock()
			times := slices.Clone(written[i])
			mu.Unlock()
			if len(times) != len(s) {
				t.Fatalf("form %d: %d rows seen written, want %d", i, len(times), len(s))
			}
			for k := range s {
				lat = append(lat, times[k].Sub(s[k].SubmittedAt))
			}
		}
		slices.Sort(lat)
		p99[a] = lat[len(lat)*99/100]
	}
	slowest, fastest := slices.Max(p99), slices.Min(p99)
	t.Logf("p99 latency per account: fastest %s, slowest %s (%v)", fastest, slowest, p99)
	if slowest > 2*fastest {
		t.Errorf("unfair: slowest account's p99 %s is over 2x the fastest's %s (%v)", slowest, fastest, p99)
	}
}
