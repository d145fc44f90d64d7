package app

import (
	"context"
	"net/http"
	"time"

	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
	"mailroom/web"
)

// wireGmail builds the gmail pipeline: its handlers in the task table, its loops
// and its web extension.
func (a *App) wireGmail(ctx context.Context) error {
	cfg := a.cfg
	gc := google.New(google.Config{
		APIURL: cfg.GoogleAPIURL, TokenURL: cfg.GoogleTokenURL,
		ClientID: cfg.GoogleClientID, ClientSecret: cfg.GoogleClientSecret, RedirectURL: cfg.redirectURL(),
		HTTPClient: &http.Client{Timeout: 30 * time.Second},
	})
	var verifier gmail.TokenVerifier
	if cfg.PushAudience != "" {
		v, err := google.NewPushVerifier(ctx, google.PushVerifierConfig{
			CertsURL: cfg.GoogleCertsURL, Audience: cfg.PushAudience, ServiceAccount: cfg.PushServiceAccount,
		})
		if err != nil {
			return err
		}
		verifier = v
	}
	p, err := gmail.New(gmail.Config{
		PubSubTopic:  cfg.PubSubTopic,
		PollInterval: cfg.GmailPollInterval,
		WatchRenew:   cfg.GmailWatchRenew,
		PushToken:    cfg.PushToken,
		Logger:       a.log,
		Registerer:   a.registry,
	}, gmail.Deps{DB: a.db, Google: gc, Queue: appQueue{a}, Verifier: verifier})
	if err != nil {
		return err
	}
	if err := p.Register(a.table); err != nil {
		return err
	}
	a.gmail = p
	a.loops = append(a.loops, p.Maintainer(), p.TombstonePruner())
	a.extensions = append(a.extensions, web.Gmail(p, web.GmailOptions{
		PublicURL: cfg.BaseURL(), PushAudience: cfg.PushAudience, PushToken: cfg.PushToken != "",
	}))
	return nil
}

// appQueue hands Enqueue to the app's queue, which is built after the
// pipelines (queue.New needs the finished table).
type appQueue struct{ a *App }

func (q appQueue) Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (store.OutboxRecord, bool, error) {
	return q.a.queue.Enqueue(tx, typ, payload, opts...)
}
