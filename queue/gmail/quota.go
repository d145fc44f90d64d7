package gmail

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"mailroom/queue/google"
	"mailroom/queue/rules"
	"mailroom/store"
)

// QuotaView is an account's use of its Gmail quota budget now, for the
// operator (API and Accounts pages).
type QuotaView struct {
	// UnitsLastMinute are the units the account spent in the last window
	// (Google's minute); Limit is its budget now (below Setting while
	// Google's refusals keep it lower); Setting is
	// MAILROOM_GMAIL_USER_UNITS_PER_MINUTE.
	UnitsLastMinute int `json:"unitsLastMinute"`
	Limit           int `json:"limit"`
	Setting         int `json:"setting"`
	// The project's units in the last window and its budget, and its units
	// today (UTC) against Google's daily billing threshold.
	ProjectUnitsLastMinute int   `json:"projectUnitsLastMinute"`
	ProjectLimit           int   `json:"projectLimit"`
	ProjectUnitsToday      int64 `json:"projectUnitsToday"`
	DailyThreshold         int64 `json:"dailyThreshold"`
	// NearDailyThreshold: the project has spent DailyWarning (80%) of it.
	NearDailyThreshold bool `json:"nearDailyThreshold"`
	// Waiting names the kinds of work waiting for budget (live,
	// reclassify, bulk); empty when none waits.
	Waiting []string `json:"waiting,omitempty"`
	// QueuedUnits estimates, while work waits, the units of the account's
	// work left (see Backlog), and QueuedMinutes the minutes of its budget
	// (Limit a minute) they take, rounded up.
	QueuedUnits   int `json:"queuedUnits,omitempty"`
	QueuedMinutes int `json:"queuedMinutes,omitempty"`
	// Status is a sentence for the account's status line when work waits
	// for quota or the project nears its daily threshold; empty otherwise.
	Status string `json:"status,omitempty"`
	// BlockedUntil is set while Google's retry time, or a window the broker
	// lost (counted as fully spent), holds calls back.
	BlockedUntil *time.Time `json:"blockedUntil,omitempty"`
}

// DailyWarning is the share of Google's daily billing threshold past which
// the status warns.
const DailyWarning = 0.8

// Quota returns the account's use of its Gmail budget; nil when no budget
// is configured.
func (p *Pipeline) Quota(ctx context.Context, accountID string) (*QuotaView, error) {
	b := p.google.Budget()
	if b == nil {
		return nil, nil
	}
	u, err := b.Usage(ctx, accountID)
	if err != nil {
		return nil, fmt.Errorf("gmail: quota of account %s: %w", accountID, err)
	}
	v := &QuotaView{
		UnitsLastMinute: u.Used, Limit: u.Limit, Setting: u.Setting,
		ProjectUnitsLastMinute: u.ProjectUsed, ProjectLimit: u.ProjectLimit,
		ProjectUnitsToday: u.Today, DailyThreshold: google.DailyBillingThreshold,
	}
	var parts []string
	for _, w := range u.Waiting {
		v.Waiting = append(v.Waiting, w.String())
	}
	if len(v.Waiting) > 0 {
		units, err := p.Backlog(ctx, accountID)
		if err != nil {
			return nil, err
		}
		v.QueuedUnits, v.QueuedMinutes = units, minutesOf(units, u.Limit)
		parts = append(parts, fmt.Sprintf("waiting for Gmail quota: about %s of work queued (%s waiting; %s of %s units spent in the last minute)",
			plural(v.QueuedMinutes, "minute"), strings.Join(v.Waiting, ", "), thousands(u.Used), thousands(u.Limit)))
	}
	if !u.BlockedUntil.IsZero() {
		t := u.BlockedUntil.UTC()
		v.BlockedUntil = &t
		parts = append(parts, "Google refused a call for quota; no Gmail call before "+t.Format("15:04:05")+" UTC")
	}
	if !u.LostUntil.IsZero() {
		t := u.LostUntil.UTC()
		if v.BlockedUntil == nil || t.After(*v.BlockedUntil) {
			v.BlockedUntil = &t
		}
		parts = append(parts, "the broker lost the last minute's quota count (a restart): it counts as fully spent, no Gmail call before "+t.Format("15:04:05")+" UTC")
	}
	if u.Limit < u.Setting {
		parts = append(parts, fmt.Sprintf("budget lowered to %d units a minute after Google's refusals (growing back to %d)", u.Limit, u.Setting))
	}
	if float64(u.Today) >= DailyWarning*float64(google.DailyBillingThreshold) {
		v.NearDailyThreshold = true
		parts = append(parts, fmt.Sprintf("the project has spent %d%% of Google's daily billing threshold today", u.Today*100/google.DailyBillingThreshold))
	}
	v.Status = strings.Join(parts, "; ")
	return v, nil
}

// WithQuota fills the GmailQuota of each view (left nil without a budget).
func (p *Pipeline) WithQuota(ctx context.Context, views []AccountView) error {
	for i := range views {
		q, err := p.Quota(ctx, views[i].ID)
		if err != nil {
			return err
		}
		views[i].GmailQuota = q
	}
	return nil
}

// minutesOf is how many minutes of a budget of limit units a minute the
// units take, rounded up (at least 1).
func minutesOf(units, limit int) int {
	if limit <= 0 {
		return 1
	}
	return max(1, (units+limit-1)/limit)
}

// thousands writes n with thousands separators: 11548 is "11,548".
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Backlog estimates the Gmail quota units of the account's work left, from
// the price list in force (google.Prices): the messages its full sync has still to
// download (messages.get, and the list pages; before a resync begins, the
// mirror's size), its reclassify batches waiting (their label changes go
// to Gmail in batchModify calls of up to 1,000 messages, so one call for
// each 1,000 threads waiting, and a messages.get per thread when a rule
// reads bodies) and its message-added tasks waiting (a messages.get each).
// Event tasks that only change the mirror cost no quota. An estimate: the
// threads of a batch may change several labels or none, a thread hold
// more than one message.
func (p *Pipeline) Backlog(ctx context.Context, accountID string) (int, error) {
	var acc store.Account
	var counts store.MessageCounts
	err := p.db.View(func(tx *store.Tx) (err error) {
		if acc, err = tx.AccountGet(accountID); err != nil {
			return err
		}
		counts, err = tx.MessageCounts(accountID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("gmail: backlog of account %s: %w", accountID, err)
	}
	left := 0
	switch s := acc.FullSyncStart; {
	case s != nil:
		left = max(s.Messages-s.Fetched, 0)
	case needsFullSync(acc):
		left = counts.Total
	}
	pr := p.google.Prices()
	body, err := p.rules.NeedsBody(ctx, accountID)
	if err != nil {
		return 0, fmt.Errorf("gmail: backlog of account %s: %w", accountID, err)
	}
	// A full sync reads bodies while a rule reads them (fetchAndStore).
	units := left*pr.Get(body) + (left+listPageSize-1)/listPageSize*pr.MessagesList
	added, batches, threads, err := p.queuedTasks(accountID)
	if err != nil {
		return 0, err
	}
	if batches > 0 {
		units += (threads + google.MaxBatchModify - 1) / google.MaxBatchModify * pr.BatchModify
	}
	units += added * pr.Get(body)
	if body {
		units += threads * pr.Get(true)
	}
	return units, nil
}

// queuedTasks counts the account's message-added tasks and reclassify
// batches (with their threads) not yet finished: the queue's counts of
// each type for the account's group, a lookup each.
func (p *Pipeline) queuedTasks(accountID string) (added, batches, threads int, err error) {
	err = p.db.View(func(tx *store.Tx) error {
		a, err := p.queue.Queued(tx, TypeMessageAdded, accountID)
		if err != nil {
			return err
		}
		b, err := p.queue.Queued(tx, rules.TypeReclassifyBatch, accountID)
		if err != nil {
			return err
		}
		added, batches, threads = a.Tasks, b.Tasks, b.Weight
		return nil
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("gmail: queued work of account %s: %w", accountID, err)
	}
	return added, batches, threads, nil
}

// FullSyncView is a full sync in progress, for a person watching it: the
// messages listed and read so far, and the Gmail units and seconds left at
// the price list and the account's quota in force.
type FullSyncView struct {
	MessagesListed int `json:"messagesListed"`
	MessagesRead   int `json:"messagesRead"`
	// UnitsLeft estimates the units of what is left: a messages.get a
	// message not read yet (threads fetched whole cost less, so it is at
	// most this) and the list pages not listed yet.
	UnitsLeft int `json:"unitsLeft"`
	// EstimatedSecondsLeft is UnitsLeft at the account's units a minute
	// (MAILROOM_GMAIL_USER_UNITS_PER_MINUTE, or the price list's), rounded
	// up; live mail and reclassifies share that quota first.
	EstimatedSecondsLeft int `json:"estimatedSecondsLeft"`
}

// fullSyncView estimates the full sync s (nil: none runs).
func (p *Pipeline) fullSyncView(s *store.FullSyncStart) *FullSyncView {
	if s == nil {
		return nil
	}
	pr := p.google.Prices()
	perWindow, window := pr.UserUnitsPerMinute, time.Minute
	if b := p.google.Budget(); b != nil {
		perWindow, window = b.Config().UserUnits, b.Config().Window
	}
	total := max(s.Messages, s.Listed)
	left := max(total-s.Fetched, 0)
	units := left * pr.MessagesGet
	if !s.ListedAll {
		units += (max(s.Messages-s.Listed, 0) + listPageSize - 1) / listPageSize * pr.MessagesList
	}
	secs := 0
	if perWindow > 0 {
		secs = int(math.Ceil(float64(units) / float64(perWindow) * window.Seconds()))
	}
	return &FullSyncView{MessagesListed: s.Listed, MessagesRead: s.Fetched, UnitsLeft: units, EstimatedSecondsLeft: secs}
}

// Summary says the full sync's progress in people's words, for the
// Accounts page: "first sync: 1,200 of 2,000 messages read, about 4
// minutes left".
func (f *FullSyncView) Summary() string {
	total := max(f.MessagesListed, f.MessagesRead)
	left := "almost done"
	switch s := f.EstimatedSecondsLeft; {
	case s >= 90*60:
		left = fmt.Sprintf("about %s left", plural((s+1799)/3600, "hour"))
	case s >= 90:
		left = fmt.Sprintf("about %s left", plural((s+59)/60, "minute"))
	case s > 0:
		left = "under 2 minutes left"
	}
	return fmt.Sprintf("full sync: %s of %s messages read, %s", thousands(f.MessagesRead), thousands(total), left)
}
