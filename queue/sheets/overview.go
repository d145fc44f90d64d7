package sheets

import (
	"context"
	"errors"
	"slices"

	"mailroom/store"
)

// AccountQuota is one Google account's use of its Sheets write quota.
type AccountQuota struct {
	AccountID string
	Email     string
	Forms     int
	QuotaUse
	// Err is set when the broker could not be asked.
	Err string
}

// Overview is what the admin Forms page shows.
type Overview struct {
	Forms    []FormView
	Accounts []AccountQuota
	// RowsPerMinute holds the rows written in each of the last 60
	// minutes, oldest first (since this process started).
	RowsPerMinute []int
	// Emails maps account ids to addresses.
	Emails map[string]string
}

// Overview gathers the forms, their bookkeeping and each account's quota
// use.
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
		aq := AccountQuota{AccountID: id, Email: o.Emails[id], Forms: n}
		use, err := p.quota.Usage(ctx, id)
		if err != nil {
			aq.Err = err.Error()
			use.Limit = p.cfg.WritesPerMinute
		}
		aq.QuotaUse = use
		o.Accounts = append(o.Accounts, aq)
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
	return o, nil
}
