package web

import (
	"time"

	"mailroom/queue/gmail"
	"mailroom/store"
)

// Sample data of the Accounts pages for TestRenderEveryTemplate.

func gmailAccountSample(at time.Time) accountPageView {
	return accountPageView{
		Account: gmail.AccountDetail{
			AccountView: gmail.AccountView{ID: "a1", UserID: "u1", Email: "ann@example.com", Status: store.AccountError,
				HistoryID: "1234", WatchExpiration: at.Format(time.RFC3339), StatusReason: "Google refused <access>; connect again.",
				LastSync: at, WatchExpires: at, LastError: "google: 401", LastErrorAt: at,
				Messages: 300, MessageCounts: store.MessageCounts{Total: 300, Unread: 12, Trashed: 3}},
			Runs: []store.SyncRun{{ID: 1, Kind: "full", Trigger: "connect", StartedAt: at, FinishedAt: at.Add(time.Second), Messages: 300},
				{ID: 2, Kind: "history", Trigger: "push", StartedAt: at, Error: "boom <b>"}},
			WatchRenewedAt: at, WantedHistoryID: 1240, SyncPending: true,
		},
		User: store.User{ID: "u1", Email: "owner@example.com"}, Watch: true, PollInterval: 15 * time.Minute,
	}
}

func gmailAccountsSample(at time.Time) accountsView {
	d := gmailAccountSample(at).Account.AccountView
	ready := d
	ready.Status, ready.StatusReason = store.AccountReady, ""
	return accountsView{
		Accounts: []gmail.AccountView{d, ready}, Users: []store.User{{ID: "u1", Name: "Owner", Email: "owner@example.com"}},
		OAuth: true, Watch: false, PollInterval: 15 * time.Minute, PushURL: "https://mail.example.com/push/gmail",
	}
}
