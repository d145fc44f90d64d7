package gmail

import (
	"context"
	"fmt"
	"strings"
	"time"

	"mailroom/queue/google"
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
		parts = append(parts, fmt.Sprintf("waiting for Gmail quota: %s work queued (%d of %d units spent in the last minute)",
			strings.Join(v.Waiting, ", "), u.Used, u.Limit))
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
