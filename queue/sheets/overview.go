package sheets

import (
	"context"
	"errors"
	"slices"
	"time"

	"mailroom/store"
)

// AccountQuota is one Google account's use of its Sheets quotas: writes
// (the embedded QuotaUse) and reads.
type AccountQuota struct {
	AccountID string
	Email     string
	Forms     int
	QuotaUse
	Reads QuotaUse
	// Err is set when the broker could not be asked.
	Err string
}

// ProjectQuota is the whole project's use of its Sheets quotas (all
// accounts together).
type ProjectQuota struct {
	Writes, WritesLimit int
	Reads, ReadsLimit   int
	// SpentUntil is set while the windows count as fully spent because
	// the broker lost their logs (see Quota).
	SpentUntil time.Time
	// Err is set when the broker could not be asked.
	Err string
}

// Overview is what the admin Forms page shows.
type Overview struct {
	Forms    []FormView
	Accounts []AccountQuota
	Project  ProjectQuota
	// RowsPerMinute holds the rows written in each of the last 60
	// minutes, oldest first (since this process started).
	RowsPerMinute []int
	// Emails maps account ids to addresses.
	Emails map[string]string
}

// Overview gathers the forms, their bookkeeping, each account's use of
// its read and write quotas and the project's.
func (p *Pipeline) Overview(ctx context.Context) (Overview, error) {
	forms, err := p.Forms("")
	if err != nil {
		return Overview{}, err
	}
	o := Overview{Forms: forms, Emails: map[string]string{}, RowsPerMinute: p.metrics.perMinute.last60(p.cfg.Now())}
	count := map[string]int{}
	for _, f := range forms {
		count[f.AccountID]++
	}
	err = p.db.View(func(tx *store.Tx) error {
		for id := range count {
			a, err := tx.AccountGet(id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			o.Emails[id] = a.Email
		}
		return nil
	})
	if err != nil {
		return Overview{}, err
	}
	for id, n := range count {
		o.Accounts = append(o.Accounts, p.accountQuota(ctx, id, o.Emails[id], n))
	}
	slices.SortFunc(o.Accounts, func(a, b AccountQuota) int {
		if a.Email != b.Email {
			if a.Email < b.Email {
				return -1
			}
			return 1
		}
		if a.AccountID < b.AccountID {
			return -1
		}
		return 1
	})
	o.Project = p.projectQuota(ctx)
	return o, nil
}

// accountQuota asks the broker for one account's use of both quotas.
func (p *Pipeline) accountQuota(ctx context.Context, id, email string, forms int) AccountQuota {
	aq := AccountQuota{AccountID: id, Email: email, Forms: forms}
	w, werr := p.quota.Usage(ctx, id)
	r, rerr := p.reads.Usage(ctx, id)
	if err := errors.Join(werr, rerr); err != nil {
		aq.Err = err.Error()
	}
	w.Limit, r.Limit = p.cfg.WritesPerMinute, p.cfg.ReadsPerMinute
	aq.QuotaUse, aq.Reads = w, r
	return aq
}

// projectQuota asks the broker for the project's use of both quotas.
func (p *Pipeline) projectQuota(ctx context.Context) ProjectQuota {
	pq := ProjectQuota{WritesLimit: p.cfg.ProjectWritesPerMinute, ReadsLimit: p.cfg.ProjectReadsPerMinute}
	w, werr := p.quota.Usage(ctx, "")
	r, rerr := p.reads.Usage(ctx, "")
	if err := errors.Join(werr, rerr); err != nil {
		pq.Err = err.Error()
	}
	pq.Writes, pq.Reads, pq.SpentUntil = w.ProjectUsed, r.ProjectUsed, w.SpentUntil
	return pq
}

// QuotaView is the Sheets quota use of a form's Google account in the
// current window (Google's minute), and the whole project's, as the forms
// API shows it.
type QuotaView struct {
	// Writes and Reads are the account's calls (Google's per-user limits);
	// ProjectWrites and ProjectReads those of all accounts together.
	Writes        QuotaCount `json:"writes"`
	Reads         QuotaCount `json:"reads"`
	ProjectWrites QuotaCount `json:"projectWrites"`
	ProjectReads  QuotaCount `json:"projectReads"`
	// SpentUntil (RFC 3339) is set while the windows count as fully spent
	// because the broker lost their logs: no call is made until then.
	SpentUntil string `json:"spentUntil,omitempty"`
}

// QuotaCount is one budget's use: the calls in the last window, the
// limit, and (for an account) its forms waiting for a slot.
type QuotaCount struct {
	LastMinute int `json:"lastMinute"`
	Limit      int `json:"limit"`
	Waiting    int `json:"waiting"`
}

// WithQuota fills each form's Quota with its account's use of the Sheets
// quotas and the project's, asking the broker once per account. A form
// whose account's use cannot be read (the broker is away) keeps a nil
// Quota: the forms themselves come from bbolt and are still shown.
func (p *Pipeline) WithQuota(ctx context.Context, forms []FormView) {
	views := map[string]*QuotaView{}
	for i := range forms {
		id := forms[i].AccountID
		v, seen := views[id]
		if !seen {
			v = p.quotaView(ctx, id)
			views[id] = v
		}
		forms[i].Quota = v
	}
}

func (p *Pipeline) quotaView(ctx context.Context, accountID string) *QuotaView {
	w, err := p.quota.Usage(ctx, accountID)
	if err != nil {
		return nil
	}
	r, err := p.reads.Usage(ctx, accountID)
	if err != nil {
		return nil
	}
	v := &QuotaView{
		Writes:        QuotaCount{LastMinute: w.Used, Limit: w.Limit, Waiting: w.Waiting},
		Reads:         QuotaCount{LastMinute: r.Used, Limit: r.Limit, Waiting: r.Waiting},
		ProjectWrites: QuotaCount{LastMinute: w.ProjectUsed, Limit: w.ProjectLimit},
		ProjectReads:  QuotaCount{LastMinute: r.ProjectUsed, Limit: r.ProjectLimit},
	}
	if !w.SpentUntil.IsZero() {
		v.SpentUntil = w.SpentUntil.UTC().Format(time.RFC3339)
	}
	return v
}
