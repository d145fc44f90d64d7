package soak_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/testkit"
	"mailroom/queue/rules"
)

// figures is what the soak prints at the end.
type figures struct {
	kills                  int
	redisRestarts, flushes int
	readyMax               time.Duration // longest start of a life to its first 200 from /readyz
	done                   map[string]int
	faults                 map[string]int // calls each kind of injected fault affected
	episodes               map[string]int // episodes of each kind
	deadLetters            map[string]bool
	accepted, unknown      int
	stored, lost, dup      int // rows: accepted ones in the sheet, missing, written twice
	drain                  time.Duration
}

// addLife counts the "task done" lines of one life of the child: the
// same task id in two lives (or twice in one) ran twice.
func (f *figures) addLife(out string) {
	if f.done == nil {
		f.done = map[string]int{}
	}
	for line := range strings.Lines(out) {
		if !strings.Contains(line, `"msg":"task done"`) {
			continue
		}
		var l struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.TaskID != "" {
			f.done[l.TaskID]++
		}
	}
}

func (f *figures) tasks() (run, twice int) {
	for _, n := range f.done {
		run += n
		if n > 1 {
			twice++
		}
	}
	return run, twice
}

// drain waits, with no more load, faults or kills, until every check
// holds: dead letters only from injected permanent faults (each redriven
// once seen, so its message reaches the mirror), every form's buffer
// written, every reclassify finished, every mirror equal to its mailbox
// and every rule label where the stored rules say. Then it checks the
// sheets row by row and the stored rules against the saves' answers.
func (w *world) drain() {
	start := time.Now()
	w.figures.deadLetters = map[string]bool{}
	said := time.Now()
	testkit.EventuallyNil(w.t, drainTimeout, "the drain: every check to hold", func() error {
		for _, check := range []func() error{w.deadLettersOnlyInjected, w.formsWritten, w.reclassifyDone, w.mirrorsEqual, w.labelsAsRules} {
			if err := check(); err != nil {
				if time.Since(said) > 15*time.Second {
					said = time.Now()
					w.t.Logf("drain, %s in: %s", time.Since(start).Round(time.Second), firstLine(err.Error()))
				}
				return err
			}
		}
		return nil
	})
	w.figures.drain = time.Since(start)
	w.checkSheets()
	w.checkSavedRules()
}

// deadLettersOnlyInjected fails the test on a dead letter that no
// injected permanent fault explains, and redrives the others.
func (w *world) deadLettersOnlyInjected() error {
	p := w.current()
	var page struct {
		Deadletters []struct {
			ID, Type, Error string
			Payload         json.RawMessage
		}
	}
	if err := p.JSON(http.MethodGet, "/api/v1/deadletters?limit=100", nil, http.StatusOK, &page); err != nil {
		return err
	}
	for _, dl := range page.Deadletters {
		var pl struct {
			MessageID string `json:"messageId"`
		}
		_ = json.Unmarshal(dl.Payload, &pl)
		w.mu.Lock()
		injected := w.permanent[pl.MessageID] != nil
		w.mu.Unlock()
		if !strings.HasPrefix(dl.Type, "gmail:message-") || !injected || !strings.Contains(dl.Error, "injected") {
			w.t.Fatalf("dead letter %s (%s, payload %s): %s; only the injected permanent faults may make dead letters", dl.ID, dl.Type, dl.Payload, dl.Error)
		}
		w.figures.deadLetters[dl.ID] = true
		if err := p.JSON(http.MethodPost, "/api/v1/deadletters/"+dl.ID+"/redrive", nil, http.StatusAccepted, nil); err != nil {
			return err
		}
	}
	if len(page.Deadletters) > 0 {
		return fmt.Errorf("%d dead letters redriven", len(page.Deadletters))
	}
	return nil
}

func (w *world) formsWritten() error {
	for _, f := range w.forms {
		var got struct{ Buffered, RowsWritten int }
		if err := w.current().JSON(http.MethodGet, "/api/v1/forms/"+f.id, nil, http.StatusOK, &got); err != nil {
			return err
		}
		rows, err := w.fake.Sheets.Rows(f.book, "Sheet1")
		if err != nil {
			return err
		}
		if got.Buffered != 0 || got.RowsWritten != len(rows) {
			return fmt.Errorf("form %s: %d buffered, %d written by its count, %d in the sheet", f.id, got.Buffered, got.RowsWritten, len(rows))
		}
	}
	return nil
}

func (w *world) reclassifyDone() error {
	for _, u := range w.users {
		var st struct {
			Pending *json.RawMessage
			Jobs    []struct {
				JobID      string
				FinishedAt *time.Time
			}
		}
		if err := w.current().JSON(http.MethodGet, "/api/v1/users/"+u.id+"/reclassify", nil, http.StatusOK, &st); err != nil {
			return err
		}
		if st.Pending != nil && string(*st.Pending) != "null" {
			return fmt.Errorf("user %s: a reclassify is pending", u.id)
		}
		for _, j := range st.Jobs {
			if j.FinishedAt == nil {
				return fmt.Errorf("user %s: reclassify job %s is running", u.id, j.JobID)
			}
		}
	}
	return nil
}

// message is one message as the API shows it.
type message struct {
	ID        string   `json:"id"`
	ThreadID  string   `json:"threadId"`
	From      string   `json:"from"`
	To        string   `json:"to"`
	Subject   string   `json:"subject"`
	Labels    []string `json:"labels"`
	Unread    bool     `json:"unread"`
	Trashed   bool     `json:"trashed"`
	HistoryID string   `json:"historyId"`
}

func (w *world) mirrorsEqual() error {
	for _, u := range w.users {
		for _, acc := range u.accounts {
			got, err := w.mirror(acc.id)
			if err != nil {
				return err
			}
			if err := mirrorDiff(w.mailbox(acc.email), got); err != nil {
				return fmt.Errorf("mirror of %s: %w", acc.email, err)
			}
		}
	}
	return nil
}

// mirrorDiff says how the mirror differs from the mailbox: how many
// messages are missing, extra or different, and the first of each.
func mirrorDiff(want, got map[string]message) error {
	var missing, extra, differ []string
	for id, m := range want {
		g, ok := got[id]
		switch {
		case !ok:
			missing = append(missing, id)
		case !cmp.Equal(m, g):
			differ = append(differ, id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	if len(missing)+len(extra)+len(differ) == 0 {
		return nil
	}
	slices.Sort(missing)
	slices.Sort(extra)
	slices.Sort(differ)
	msg := fmt.Sprintf("%d messages missing, %d extra, %d different", len(missing), len(extra), len(differ))
	if len(missing) > 0 {
		msg += fmt.Sprintf("; missing %+v", want[missing[0]])
	}
	if len(extra) > 0 {
		msg += fmt.Sprintf("; extra %+v", got[extra[0]])
	}
	if len(differ) > 0 {
		msg += fmt.Sprintf("; %s in Gmail %+v, in the mirror %+v", differ[0], want[differ[0]], got[differ[0]])
	}
	return errors.New(msg)
}

// mirror reads every message of the account through the API.
func (w *world) mirror(accountID string) (map[string]message, error) {
	out := map[string]message{}
	cursor := ""
	for {
		var page struct {
			Messages []message
			Next     string
		}
		if err := w.current().JSON(http.MethodGet, "/api/v1/accounts/"+accountID+"/messages?limit=500&cursor="+url.QueryEscape(cursor), nil, http.StatusOK, &page); err != nil {
			return nil, err
		}
		for _, m := range page.Messages {
			sort.Strings(m.Labels)
			out[m.ID] = m
		}
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
}

// mailbox is the emulator's mailbox as the API must show it.
func (w *world) mailbox(email string) map[string]message {
	names := w.fake.Gmail.LabelNames(email)
	out := map[string]message{}
	for _, m := range w.fake.Gmail.Messages(email) {
		labels := make([]string, 0, len(m.LabelIDs))
		for _, id := range m.LabelIDs {
			labels = append(labels, names[id])
		}
		sort.Strings(labels)
		out[m.ID] = message{ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Subject: m.Subject,
			Labels: labels, Unread: m.Unread(), Trashed: m.Trashed(), HistoryID: strconv.FormatUint(m.HistoryID, 10)}
	}
	return out
}

// storedRules reads the user's rules as mailroom keeps them.
func (w *world) storedRules(userID string) (map[string]rules.Spec, error) {
	var got struct {
		Rules []struct {
			ID string
			rules.Spec
		}
	}
	if err := w.current().JSON(http.MethodGet, "/api/v1/users/"+userID+"/rules", nil, http.StatusOK, &got); err != nil {
		return nil, err
	}
	out := map[string]rules.Spec{}
	for _, r := range got.Rules {
		out[r.ID] = r.Spec
	}
	return out, nil
}

// labelsAsRules checks, message by message in Gmail, that each rule's
// label is on exactly the messages its stored version matches.
func (w *world) labelsAsRules() error {
	for _, u := range w.users {
		specs, err := w.storedRules(u.id)
		if err != nil {
			return err
		}
		for _, spec := range specs {
			c, err := rules.Compile(spec)
			if err != nil {
				return fmt.Errorf("stored rule %s: %w", spec.Label, err)
			}
			for _, acc := range u.accounts {
				labelID, _ := w.fake.Gmail.LabelID(acc.email, spec.Label)
				for _, m := range w.fake.Gmail.Messages(acc.email) {
					want := c.Match(&rules.Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Body})
					if has := labelID != "" && slices.Contains(m.LabelIDs, labelID); has != want {
						return fmt.Errorf("%s: message %s (thread %s, from %q, subject %q, history id %d) has label %s: %v, its rule (%+v) says %v; reclassify %s",
							acc.email, m.ID, m.ThreadID, m.From, m.Subject, m.HistoryID, spec.Label, has, spec.Conditions, want, w.reclassifyState(u.id))
					}
				}
			}
		}
	}
	return nil
}

// checkSheets fails the test unless every accepted submission is in its
// sheet exactly once and in submission order, and every other row is one
// whose answer a kill cut.
func (w *world) checkSheets() {
	for _, f := range w.forms {
		rows, err := w.fake.Sheets.Rows(f.book, "Sheet1")
		if err != nil {
			w.t.Fatal(err)
		}
		f.mu.Lock()
		accepted, unknown := slices.Clone(f.accepted), f.unknown
		f.mu.Unlock()
		seen := map[string]int{}
		prev, disorder := "", 0
		for _, r := range rows {
			id := r[len(r)-1]
			seen[id]++
			if seen[id] == 2 {
				w.figures.dup++
			}
			if id < prev {
				disorder++
			}
			prev = max(prev, id)
		}
		lost := 0
		for _, id := range accepted {
			if seen[id] == 0 {
				lost++
			}
		}
		w.figures.accepted += len(accepted)
		w.figures.unknown += unknown
		w.figures.stored += len(accepted) - lost
		w.figures.lost += lost
		extra := len(seen) - (len(accepted) - lost)
		if lost > 0 || disorder > 0 || extra > unknown || extra < 0 {
			w.t.Errorf("form %s: %d rows for %d accepted submissions: %d lost, %d out of order, %d written twice, %d not accepted (only %d answers were cut by a kill)",
				f.id, len(rows), len(accepted), lost, disorder, w.figures.dup, extra, unknown)
		}
	}
	if w.figures.dup > 0 {
		w.t.Errorf("%d rows written twice", w.figures.dup)
	}
}

// checkSavedRules fails the test unless each stored rule is the last
// version whose save was acknowledged, or one tried after it whose answer
// a kill cut.
func (w *world) checkSavedRules() {
	for _, u := range w.users {
		specs, err := w.storedRules(u.id)
		if err != nil {
			w.t.Fatal(err)
		}
		for _, r := range u.rules {
			r.mu.Lock()
			allowed := append([]int{r.saved}, r.unknown...)
			r.mu.Unlock()
			ok := false
			for _, v := range allowed {
				ok = ok || cmp.Equal(specs[r.id], r.spec(v))
			}
			if !ok {
				w.t.Errorf("rule %s is stored as %+v; want version %d (the last acknowledged) or one of %v (answers cut)", r.id, specs[r.id], r.saved, r.unknown)
			}
		}
	}
}

// faultLine says, per kind, how many episodes were injected and how
// many calls they failed or slowed.
func (f *figures) faultLine() string {
	kinds := make([]string, 0, len(f.episodes))
	for k := range f.episodes {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d (%d calls)", k, f.episodes[k], f.faults[k])
	}
	return strings.Join(parts, ", ")
}

// report prints the figures and fails the test when rows were lost or
// doubled.
func (w *world) report() {
	f := &w.figures
	f.addLife(w.current().Out.String())
	run, twice := f.tasks()
	saves, refused := 0, 0
	for _, u := range w.users {
		for _, r := range u.rules {
			saves, refused = saves+r.tries, refused+r.refused
		}
	}
	w.mu.Lock()
	permanent, fired := len(w.permanent), 0
	for _, h := range w.permanent {
		fired += h.Fired()
	}
	w.mu.Unlock()
	sheets, push := w.fake.Sheets.Stats(), w.fake.PushStats()
	broker := "embedded broker"
	if w.cfg.redis != nil {
		broker = "external redis-server"
	}
	lines := []string{
		fmt.Sprintf("soak, %s: %s of load, seed %d", broker, w.cfg.duration, w.cfg.seed),
		fmt.Sprintf("  kills survived:                 %d", f.kills),
		fmt.Sprintf("  Redis losses survived:          %d (%d restarts without persistence, %d FLUSHALL)", f.redisRestarts+f.flushes, f.redisRestarts, f.flushes),
		fmt.Sprintf("  tasks run:                      %d", run),
		fmt.Sprintf("  tasks that ran twice:           %d (at least once; effects checked exactly once)", twice),
		fmt.Sprintf("  longest restart to ready:       %s", f.readyMax.Round(time.Millisecond)),
		fmt.Sprintf("  rows lost:                      %d (of %d accepted)", f.lost, f.accepted),
		fmt.Sprintf("  duplicate rows:                 %d", f.dup),
		fmt.Sprintf("  submissions cut by a kill:      %d", f.unknown),
		fmt.Sprintf("  dead letters:                   %d (permanent faults injected %d, fired %d; a kill may cut one before it is recorded)", len(f.deadLetters), permanent, fired),
		fmt.Sprintf("  rule saves:                     %d (%d refused with 429/503)", saves, refused),
		fmt.Sprintf("  Google fault episodes:          %s", f.faultLine()),
		fmt.Sprintf("  Google's own refusals:          %d Gmail quota, %d Sheets quota (429); pushes %d delivered, %d failed (child down)",
			w.fake.Gmail.TotalQuotaRefusals(), sheets.RejectedWrites+sheets.RejectedReads, push.Sent, push.Failed),
		fmt.Sprintf("  drain after the load:           %s", f.drain.Round(time.Millisecond)),
	}
	fmt.Println(strings.Join(lines, "\n")) // on stdout: shown with -v (make soak) and on failure
	if f.lost > 0 || f.dup > 0 {
		w.t.Errorf("%d rows lost, %d duplicate rows: both must be 0", f.lost, f.dup)
	}
	if f.kills == 0 {
		w.t.Error("no kill happened during the load: the soak proves nothing (SOAK_DURATION too short?)")
	}
	if w.cfg.redis != nil && f.redisRestarts+f.flushes == 0 {
		w.t.Error("Redis never forgot during the load: the soak proves nothing (SOAK_DURATION too short?)")
	}
}

// firstLine shortens a check's error for the drain's progress lines: its
// first few lines.
func firstLine(s string) string {
	lines := strings.SplitN(s, "\n", 6)
	if len(lines) > 5 {
		return strings.Join(lines[:5], "\n") + "\n…"
	}
	return s
}

// reclassifyState is the user's reclassify answer, for a failure message.
func (w *world) reclassifyState(userID string) string {
	status, raw, err := w.current().Do(http.MethodGet, "/api/v1/users/"+userID+"/reclassify", nil)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d %s", status, raw)
}
