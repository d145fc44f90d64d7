package app

import (
	"context"

	"mailroom/queue/gmail"
	"mailroom/queue/google"
)

// wireGmail builds the gmail pipeline (after the rules it applies to new
// mail; web reaches it through buildWeb).
func (a *App) wireGmail(ctx context.Context) (pipeline, error) {
	cfg := a.cfg
	var verifier gmail.TokenVerifier
	if cfg.PushAudience != "" {
		v, err := google.NewPushVerifier(ctx, google.PushVerifierConfig{
			CertsURL: cfg.GoogleCertsURL, Audience: cfg.PushAudience, ServiceAccount: cfg.PushServiceAccount,
		})
		if err != nil {
			return nil, err
		}
		verifier = v
	}
	p, err := gmail.New(gmail.Config{
		PubSubTopic:      cfg.PubSubTopic,
		PollInterval:     cfg.GmailPollInterval,
		FastPollInterval: cfg.GmailFastPollInterval,
		WatchRenew:       cfg.GmailWatchRenew,
		PushToken:        cfg.PushToken,
		Alert:            a.alerts.Raise,
		Logger:           a.log,
		Registerer:       a.registry,
	}, gmail.Deps{DB: a.db, Accounts: a.accounts, Queue: a.queue, Verifier: verifier, Rules: a.rules})
	if err != nil {
		return nil, err
	}
	a.gmail = p
	return p, nil
}
