package app

import (
	"context"
	"net/http"
	"time"

	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/sheets"
)

// wireAccounts builds the Google-accounts service the Gmail, rules and
// Sheets pipelines share (one token source per account: one refresh, one
// saved token).
func (a *App) wireAccounts(context.Context) error {
	cfg := a.cfg
	gm, err := google.NewMetrics(a.registry)
	if err != nil {
		return err
	}
	gc := google.New(google.Config{
		APIURL: cfg.GoogleAPIURL, TokenURL: cfg.GoogleTokenURL, RevokeURL: cfg.GoogleRevokeURL,
		ClientID: cfg.GoogleClientID, ClientSecret: cfg.GoogleClientSecret, RedirectURL: cfg.redirectURL(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second},
		Metrics:    gm,
	})
	a.accounts = accounts.New(a.db, gc, accounts.Config{Logger: a.log})
	return nil
}

// accountSheets gives the sheets pipeline each account's Sheets client.
type accountSheets struct{ s *accounts.Service }

func (c accountSheets) Sheets(ctx context.Context, accountID string) (sheets.SheetsClient, error) {
	s, err := c.s.Sheets(ctx, accountID)
	if err != nil {
		return nil, err
	}
	return s, nil
}
