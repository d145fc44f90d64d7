package app

import (
	"context"
	"net/http"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/sheets"
)

// wireAccounts builds the Google-accounts service the Gmail, rules and
// Sheets pipelines share (one token source per account: one refresh, one
// saved token).
func (a *App) wireAccounts(context.Context) (pipeline, error) {
	cfg := a.cfg
	// One Gmail budget per account and for the project, in the broker: every
	// Gmail call of every pipeline spends from it.
	var budget *google.Budget
	if !a.deps.GmailQuotaOff {
		// A window the broker lost (a restart of the embedded store) counts
		// as fully spent until it has passed, unless Google's count was
		// lost with it (the demo's emulator).
		spentUntil := a.watch.SpentUntil
		if a.deps.GoogleRestartsWithProcess || a.fleet != nil {
			// (A fleet's Redis outlives this process's broker.)
			spentUntil = func(time.Duration) time.Time { return time.Time{} }
		}
		var err error
		store, fallback, share := a.budgetStores()
		budget, err = google.NewBudget(google.BudgetConfig{
			Prices: cfg.GmailPrices(), UserUnits: cfg.GmailUserUnitsInForce(), ProjectUnits: cfg.GmailProjectUnits, Window: cfg.GmailQuotaWindow,
			SpentUntil: spentUntil, Fallback: fallback, Share: share,
			// A call waiting for quota gives its task back when its queue stops.
			Wait:   queue.Wait,
			Logger: a.log, Registerer: a.registry,
		}, store)
		if err != nil {
			return nil, err
		}
	}
	gc := google.New(google.Config{
		APIURL: cfg.GoogleAPIURL, TokenURL: cfg.GoogleTokenURL, AuthURL: cfg.GoogleAuthURL, RevokeURL: cfg.GoogleRevokeURL,
		ClientID: cfg.GoogleClientID, ClientSecret: cfg.GoogleClientSecret, RedirectURL: cfg.redirectURL(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: a.deps.GoogleTransport},
		Budget:     budget,
		Prices:     cfg.GmailPrices(),
		Registerer: a.registry,
	})
	s, err := accounts.New(accounts.Config{Logger: a.log}, accounts.Deps{DB: a.db, Google: gc})
	if err != nil {
		return nil, err
	}
	a.accounts = s
	return s, nil
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
