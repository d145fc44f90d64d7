package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// eventChange is one change the events scenario made: when (just before
// the emulator made it) and in which step of the ramp.
type eventChange struct {
	at   time.Time
	step int
}

// changeLog holds the changes made, by the key the event reporting each
// carries (changeKeys).
type changeLog struct {
	mu    sync.Mutex
	byKey map[string]eventChange
}

func (l *changeLog) add(key string, c eventChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byKey[key] = c
}

func (l *changeLog) get(key string) (eventChange, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.byKey[key]
	return c, ok
}

// changeKeys returns the keys of the changes an event reports: a new
// message's id, or each label a message.labeled added; form and other
// events have none (formEvent tells form.rows_written apart).
func changeKeys(d hookDelivery) []string {
	switch d.typ {
	case store.EventMessageAdded:
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(d.data, &m) != nil || m.ID == "" {
			return nil
		}
		return []string{"added/" + d.accountID + "/" + m.ID}
	case store.EventMessageLabeled:
		var m struct {
			MessageID string   `json:"messageId"`
			Added     []string `json:"added"`
		}
		if json.Unmarshal(d.data, &m) != nil {
			return nil
		}
		keys := make([]string, 0, len(m.Added))
		for _, name := range m.Added {
			keys = append(keys, "labeled/"+d.accountID+"/"+m.MessageID+"/"+name)
		}
		return keys
	}
	return nil
}

// mailboxChanger makes one account's changes in the emulator: every 50th
// a new message, the others a label added to the next message, one label
// per round over the mailbox (so each change has a key of its own). The
// rounds go over the mailbox as it was when the changer was made: a label
// added to a message the changer has just added, before mailroom read it,
// is reported in that message's message.added (its labels), not as a
// message.labeled of its own, so such a change would never arrive under
// its key.
type mailboxChanger struct {
	email, account string
	msgs           []string
	labels, names  []string // label ids and names, one per round
	round, pos, n  int
}

// eventsLabelName is round i's label.
func eventsLabelName(i int) string { return fmt.Sprintf("Bench R%d", i) }

func newMailboxChanger(g *googlefake.Gmail, email string, rounds int) (*mailboxChanger, error) {
	m := &mailboxChanger{email: email}
	for _, msg := range g.Messages(email) {
		m.msgs = append(m.msgs, msg.ID)
	}
	for i := range rounds {
		id, err := g.CreateLabel(email, eventsLabelName(i))
		if err != nil {
			return nil, err
		}
		m.labels, m.names = append(m.labels, id), append(m.names, eventsLabelName(i))
	}
	return m, nil
}

// change makes the account's next change and logs it under its key.
func (m *mailboxChanger) change(g *googlefake.Gmail, gen *googlefake.Generator, log *changeLog, step int) error {
	m.n++
	c := eventChange{at: time.Now(), step: step}
	if m.n%50 == 0 {
		ids, err := gen.Add(g, m.email, 1)
		if err != nil {
			return err
		}
		log.add("added/"+m.account+"/"+ids[0], c)
		return nil
	}
	if m.pos == len(m.msgs) {
		m.round, m.pos = m.round+1, 0
	}
	if m.round == len(m.labels) {
		return fmt.Errorf("%s: all %d label rounds of %d messages used (a longer ramp needs more)", m.email, len(m.labels), len(m.msgs))
	}
	id := m.msgs[m.pos]
	m.pos++
	log.add("labeled/"+m.account+"/"+id+"/"+m.names[m.round], c)
	return g.AddLabels(m.email, id, m.labels[m.round])
}

// eventsSource offers changes at a rate: mail through the emulator with a
// push per changed account every tick, and form rows submitted through
// the Sheets pipeline (flushed at serve's settings, each flush one
// form.rows_written).
type eventsSource struct {
	fleet    *gmailFleet
	changers []*mailboxChanger
	gen      *googlefake.Generator
	log      *changeLog
	forms    []string
	next     int // the account of the next change
	rows     int // form rows submitted
}

// eventsTick is how often the source makes a tick's changes and pushes.
const eventsTick = 100 * time.Millisecond

// offer makes changes at rate a second for dur as step, and returns how
// many it made.
func (s *eventsSource) offer(ctx context.Context, rate float64, dur time.Duration, step int) (int, error) {
	tick := time.NewTicker(eventsTick)
	defer tick.Stop()
	made, due := 0, 0.0
	for end := time.Now().Add(dur); time.Now().Before(end); {
		due += rate * eventsTick.Seconds()
		touched := map[int]bool{}
		for ; due >= 1; due-- {
			i := s.next % len(s.changers)
			s.next++
			if err := s.changers[i].change(s.fleet.fake.Gmail, s.gen, s.log, step); err != nil {
				return made, err
			}
			touched[i] = true
			made++
		}
		if err := s.pushAll(ctx, touched); err != nil {
			return made, err
		}
		if err := s.submitRow(ctx); err != nil {
			return made, err
		}
		select {
		case <-ctx.Done():
			return made, ctx.Err()
		case <-tick.C:
		}
	}
	return made, nil
}

// pushAll pushes the touched accounts at once, as Pub/Sub delivers
// pushes (a push commits its sync: one after the other, the commits would
// bound the rate offered).
func (s *eventsSource) pushAll(ctx context.Context, touched map[int]bool) error {
	errs := make(chan error, len(touched))
	for i := range touched {
		go func() { errs <- s.fleet.push(ctx, i) }()
	}
	var first error
	for range touched {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// submitRow submits one row to the next form.
func (s *eventsSource) submitRow(ctx context.Context) error {
	if len(s.forms) == 0 {
		return nil
	}
	id := s.forms[s.rows%len(s.forms)]
	s.rows++
	answers := map[string]json.RawMessage{"name": json.RawMessage(fmt.Sprintf("%q", fmt.Sprintf("Person %d", s.rows))), "answer": json.RawMessage(`"yes"`)}
	if _, err := s.fleet.app.Sheets().Submit(ctx, id, answers); err != nil {
		return fmt.Errorf("submit a row to form %s: %w", id, err)
	}
	return nil
}

// addForms creates n forms, one on each of the first n accounts, each on a
// fresh spreadsheet of that account.
func (s *eventsSource) addForms(ctx context.Context, n int) error {
	f := s.fleet
	for i := range min(n, len(f.ids)) {
		var acc store.Account
		if err := f.db.View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(f.ids[i]); return err }); err != nil {
			return err
		}
		book, err := f.fake.Sheets.CreateSpreadsheet(f.emails[i], fmt.Sprintf("Events bench %d", i))
		if err != nil {
			return err
		}
		form, err := f.app.Sheets().CreateForm(ctx, sheets.FormInput{UserID: acc.UserID, AccountID: acc.ID, SpreadsheetID: book, Sheet: "Sheet1", Columns: []string{"name", "answer"}})
		if err != nil {
			return fmt.Errorf("create form on %s: %w", f.emails[i], err)
		}
		s.forms = append(s.forms, form.ID)
	}
	return nil
}
