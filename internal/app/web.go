package app

import (
	"mailroom/web"
)

// buildWeb builds the HTTP handler over the app's parts: the pipelines are
// passed as they are; web's routes table decides who reaches what.
func (a *App) buildWeb() error {
	generated, err := web.EnsureAdminPassword(a.db, a.cfg.AdminPassword)
	if err != nil {
		return err
	}
	a.generatedPassword = generated
	deps := web.Deps{
		Logger:         a.log,
		DB:             a.db,
		Queue:          a.queue,
		Gatherer:       a.registry,
		Ready:          a.ready,
		Problems:       a.Problems,
		APIToken:       a.cfg.APIToken,
		MetricsToken:   a.cfg.MetricsToken,
		AdminPassword:  a.cfg.AdminPassword,
		PublicURL:      a.cfg.BaseURL(),
		TrustedProxies: a.cfg.TrustedProxies,
		Demo:           a.cfg.Demo,
		Alerts:         a.alerts,
		GmailOptions:   web.GmailOptions{PublicURL: a.cfg.BaseURL(), PushAudience: a.cfg.PushAudience, PushToken: a.cfg.PushToken != ""},
		DemoSource:     a.demoSource,
		Setup:          a.setupOptions(),
	}
	if a.fleet != nil {
		deps.Fleet = a.fleetStatus
	}
	// Typed nils would look wired: only set what exists.
	if a.gmail != nil {
		deps.Gmail = a.gmail
		deps.Connect, deps.ConnectRedirectURIs = a.accounts, a.cfg.ConnectRedirectURIs
	}
	if a.rules != nil {
		deps.Rules = a.rules
	}
	if a.sheets != nil {
		deps.Forms = a.sheets
	}
	if a.debug != nil {
		deps.DebugTasks = a.debug
	}
	if a.webhooks != nil {
		deps.Webhooks = a.webhooks
		deps.EventsRetention = a.cfg.EventsRetention
	}
	h, err := web.New(deps)
	if err != nil {
		return err
	}
	a.handler = h
	return nil
}
