package store

import (
	"encoding/hex"
	"slices"
	"strconv"
	"time"
)

// The changes that make events are found where the store records them
// (MessagePut, AccountPut, AccountDelete, the sheet writes' bookkeeping),
// by comparing the record before and after: every path that changes a
// message, an account's status or a form's state gives its event, in its
// own transaction, without each caller remembering to.

// MessageView is a message as the API shows it (and message.added carries
// it). Label ids of user labels are shown by name, system labels by id.
type MessageView struct {
	ID        string   `json:"id"`
	ThreadID  string   `json:"threadId"`
	From      string   `json:"from"`
	To        string   `json:"to"`
	Cc        string   `json:"cc,omitempty"`
	Subject   string   `json:"subject"`
	Snippet   string   `json:"snippet"`
	Date      string   `json:"date,omitempty"`
	Labels    []string `json:"labels"`
	Unread    bool     `json:"unread"`
	Trashed   bool     `json:"trashed"`
	HistoryID string   `json:"historyId"`
}

// View is the message as the API shows it, with names (the account's label
// map, id → name) for its user labels.
func (m *Message) View(names map[string]string) MessageView {
	labels := make([]string, 0, len(m.LabelIDs))
	for _, id := range m.LabelIDs {
		labels = append(labels, labelName(names, id))
	}
	slices.Sort(labels)
	v := MessageView{
		ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject,
		Snippet: m.Snippet, Labels: labels, Unread: m.Unread(), Trashed: m.Trashed(),
	}
	if !m.Date.IsZero() {
		v.Date = m.Date.UTC().Format(time.RFC3339)
	}
	if m.HistoryID != 0 {
		v.HistoryID = strconv.FormatUint(m.HistoryID, 10)
	}
	return v
}

func labelName(names map[string]string, id string) string {
	if n := names[id]; n != "" {
		return n
	}
	return id
}

// messageRef is the data of the events that name a message.
type messageRef struct {
	MessageID string `json:"messageId"`
	ThreadID  string `json:"threadId"`
}

// labeledData is message.labeled's data.
type labeledData struct {
	MessageID string   `json:"messageId"`
	ThreadID  string   `json:"threadId"`
	Added     []string `json:"added"`
	Removed   []string `json:"removed"`
	By        string   `json:"by"`
	RuleID    string   `json:"ruleId,omitempty"`
}

// messageEvents appends the events of a message's change from old (nil:
// none) to m. Placeholders and tombstones are not listed, so their
// changes are not events: a message is added when it becomes listed,
// deleted when a listed one becomes a tombstone.
func (tx *Tx) messageEvents(accountID string, old, m *Message) error {
	was := old != nil && old.Visible()
	is := m.Visible()
	if !was && !is {
		return nil
	}
	acc, err := tx.AccountGet(accountID)
	if err != nil {
		return err
	}
	appendRef := func(typ string) error {
		return tx.eventAppendJSON(typ, acc.UserID, accountID, "", messageRef{m.ID, m.ThreadID})
	}
	switch {
	case !was:
		names, err := tx.Labels(accountID)
		if err != nil {
			return err
		}
		return tx.eventAppendJSON(EventMessageAdded, acc.UserID, accountID, "", m.View(names))
	case !is:
		if m.Deleted {
			return appendRef(EventMessageDeleted)
		}
		return nil
	}
	if o, n := old.Unread(), m.Unread(); o != n {
		typ := EventMessageRead
		if n {
			typ = EventMessageUnread
		}
		if err := appendRef(typ); err != nil {
			return err
		}
	}
	if o, n := old.Trashed(), m.Trashed(); o != n {
		typ := EventMessageRestored
		if n {
			typ = EventMessageTrashed
		}
		if err := appendRef(typ); err != nil {
			return err
		}
	}
	return tx.labelEvents(acc, old, m)
}

// labelEvents appends message.labeled for the labels other than UNREAD
// and TRASH that changed: one event for Gmail's changes and one per rule
// whose recorded change (its provenance) this is, so that a change a rule
// made is reported once, as the rule's, when Gmail's history echoes it.
func (tx *Tx) labelEvents(acc Account, old, m *Message) error {
	var added, removed []string
	for _, l := range m.LabelIDs {
		if l != LabelUnread && l != LabelTrash && !old.HasLabel(l) {
			added = append(added, l)
		}
	}
	for _, l := range old.LabelIDs {
		if l != LabelUnread && l != LabelTrash && !m.HasLabel(l) {
			removed = append(removed, l)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return nil
	}
	prov, err := tx.LabelProvenance(acc.ID, m.ID)
	if err != nil {
		return err
	}
	names, err := tx.Labels(acc.ID)
	if err != nil {
		return err
	}
	byRule := map[string]*labeledData{}
	var order []string // "" is Gmail's
	group := func(l string, present bool) *labeledData {
		rule := ""
		if p, ok := prov[l]; ok && p.Present == present {
			rule = p.RuleID
		}
		d := byRule[rule]
		if d == nil {
			d = &labeledData{MessageID: m.ID, ThreadID: m.ThreadID, Added: []string{}, Removed: []string{}, By: "gmail", RuleID: rule}
			if rule != "" {
				d.By = "rule"
			}
			byRule[rule] = d
			order = append(order, rule)
		}
		return d
	}
	for _, l := range added {
		d := group(l, true)
		d.Added = append(d.Added, labelName(names, l))
	}
	for _, l := range removed {
		d := group(l, false)
		d.Removed = append(d.Removed, labelName(names, l))
	}
	slices.Sort(order)
	for _, rule := range order {
		if err := tx.eventAppendJSON(EventMessageLabeled, acc.UserID, acc.ID, "", byRule[rule]); err != nil {
			return err
		}
	}
	return nil
}

// statusData is account.status's data.
type statusData struct {
	Status       string `json:"status"`
	StatusReason string `json:"statusReason"`
}

// accountStatusEvent appends account.status when a's status or its reason
// differs from old's (nil: a new account).
func (tx *Tx) accountStatusEvent(old *Account, a Account) error {
	if old != nil && old.Status == a.Status && old.StatusReason == a.StatusReason {
		return nil
	}
	return tx.eventAppendJSON(EventAccountStatus, a.UserID, a.ID, "", statusData{a.Status, a.StatusReason})
}

// formStateData is form.state's data.
type formStateData struct {
	State     string `json:"state"`
	LastError string `json:"lastError"`
}

// formStateEvent appends form.state for a form whose state changed to
// state ("ok" or "error").
func (tx *Tx) formStateEvent(formID, state, lastError string) error {
	f, err := tx.FormGet(formID)
	if err != nil {
		return err
	}
	return tx.eventAppendJSON(EventFormState, f.UserID, f.AccountID, f.ID, formStateData{state, lastError})
}

// rowsWrittenData is form.rows_written's data.
type rowsWrittenData struct {
	FormID        string   `json:"formId"`
	SubmissionIDs []string `json:"submissionIds"`
	FirstRow      int      `json:"firstRow"`
	LastRow       int      `json:"lastRow"`
}

// rowsWrittenEvent appends form.rows_written for the write p, whose
// submission ids are ids (the buffer's values).
func (tx *Tx) rowsWrittenEvent(formID string, p SheetWrite, ids [][]byte) error {
	f, err := tx.FormGet(formID)
	if err != nil {
		return err
	}
	d := rowsWrittenData{FormID: formID, SubmissionIDs: make([]string, len(ids)), FirstRow: p.Row, LastRow: p.Row + p.Count - 1}
	for i, id := range ids {
		d.SubmissionIDs[i] = hex.EncodeToString(id)
	}
	return tx.eventAppendJSON(EventFormRowsWritten, f.UserID, f.AccountID, f.ID, d)
}

// reclassifyDoneData is reclassify.done's data.
type reclassifyDoneData struct {
	JobID          string   `json:"jobId"`
	RuleIDs        []string `json:"ruleIds"`
	ThreadsLabeled int      `json:"threadsLabeled"`
}

func (tx *Tx) reclassifyDoneEvent(j ReclassifyJob) error {
	return tx.eventAppendJSON(EventReclassifyDone, j.UserID, "", "", reclassifyDoneData{j.ID, j.RuleIDs, j.ThreadsLabeled})
}

// formData is the data of form.created and form.deleted.
type formData struct {
	FormID string `json:"formId"`
}

func (tx *Tx) formEvent(typ string, f Form) error {
	return tx.eventAppendJSON(typ, f.UserID, f.AccountID, f.ID, formData{f.ID})
}

// deadLetterData is the data of deadletter.added, deadletter.redriven and
// deadletter.discarded.
type deadLetterData struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// deadLetterEvent appends a dead letter's event, with the user whose work
// failed (d.UserID, or its payload's owner for a dead letter archived
// before the user was kept) and the account or form its payload names.
func (tx *Tx) deadLetterEvent(typ string, d DeadLetter) error {
	o := payloadOwner(d.Payload)
	var err error
	switch {
	case d.UserID != "":
		o.UserID = d.UserID
	case o.UserID == "":
		if o.UserID, err = tx.ownerUser(o); err != nil {
			return err
		}
	}
	return tx.eventAppendJSON(typ, o.UserID, o.AccountID, o.FormID, deadLetterData{d.ID, d.Type})
}
