package web

import (
	"context"
	"encoding/json"
	"time"

	"mailroom/queue/gmail"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// The pipelines as this package uses them: small interfaces declared by
// their consumer, grouped per pipeline. *gmail.Pipeline, *rules.Pipeline
// and *sheets.Pipeline implement them (asserted below); tests may pass
// their own.

// GmailAccounts connects, lists, resyncs and deletes Gmail accounts.
type GmailAccounts interface {
	Connect(ctx context.Context, r gmail.ConnectRequest) (acc store.Account, created bool, err error)
	Account(id string) (gmail.AccountView, error)
	Accounts() ([]gmail.AccountView, error)
	Detail(id string, runs int) (gmail.AccountDetail, error)
	// Quota and WithQuota give an account's (or each view's) use of its
	// Gmail budget; nil without a budget.
	Quota(ctx context.Context, accountID string) (*gmail.QuotaView, error)
	WithQuota(ctx context.Context, views []gmail.AccountView) error
}

// GmailActions are an account's resync and delete.
type GmailActions interface {
	Resync(ctx context.Context, id string) error
	// Delete deletes the account, revoking its grant at Google; a refused
	// revoke is in Deleted.RevokeErr and does not stop the delete.
	Delete(ctx context.Context, id string) (gmail.Deleted, error)
}

// GmailMessages reads an account's mirrored mail metadata.
type GmailMessages interface {
	Messages(accountID string, q gmail.MessageQuery) (msgs []gmail.MessageView, next string, err error)
	Message(accountID, id string) (gmail.MessageView, error)
}

// GmailIntake takes push notifications, and says whether accounts can be
// connected through Google's consent (ConnectLinks runs it).
type GmailIntake interface {
	Push(ctx context.Context, r gmail.PushRequest) error
	OAuthConfigured() bool
}

// GmailSettings are what the Accounts pages say about keeping in sync.
type GmailSettings interface {
	WatchEnabled() bool
	PollInterval() time.Duration
	FastPollInterval() time.Duration
}

// GmailPipeline is the Gmail pipeline: all of the above.
type GmailPipeline interface {
	GmailAccounts
	GmailActions
	GmailMessages
	GmailIntake
	GmailSettings
}

// RuleReader reads rules and their reclassify state.
type RuleReader interface {
	Config() rules.Config
	Rules(userID string) ([]rules.Rule, error)
	Rule(id string) (rules.Rule, error)
	Status(userID string, limit int) (rules.Status, error)
}

// RuleWriter saves rules.
type RuleWriter interface {
	ParseSpec(raw []byte) (rules.Spec, error)
	Create(ctx context.Context, userID string, spec rules.Spec) (rules.Saved, error)
	Update(ctx context.Context, id string, spec rules.Spec) (rules.Saved, error)
	Delete(ctx context.Context, id string) (rules.Saved, error)
}

// RulesPipeline is the label rules pipeline: read, write and preview.
type RulesPipeline interface {
	RuleReader
	RuleWriter
	Preview(userID string, s rules.Spec, sample int) (rules.Preview, error)
}

// FormReader reads forms and the Sheets overview.
type FormReader interface {
	Config() sheets.Config
	Form(id string) (sheets.FormView, error)
	Forms(userID string) ([]sheets.FormView, error)
	Overview(ctx context.Context) (sheets.Overview, error)
	// WithQuota fills each form's use of the Sheets read and write quotas
	// (its account's and the project's).
	WithQuota(ctx context.Context, forms []sheets.FormView)
}

// FormWriter creates, repoints, retries and deletes forms and takes
// submissions.
type FormWriter interface {
	CreateForm(ctx context.Context, in sheets.FormInput) (sheets.FormView, error)
	DeleteForm(id string, dropAtMost int) (dropped int, err error)
	Submit(ctx context.Context, formID string, answers map[string]json.RawMessage) (store.Submission, error)
	// Repoint sends the form's unwritten rows to another sheet.
	Repoint(ctx context.Context, formID string, in sheets.FormTarget) (sheets.FormView, error)
	// Retry checks a form (one in error above all) and flushes it at once.
	Retry(formID string) (sheets.FormView, error)
}

// FormsPipeline is the Google Sheets pipeline.
type FormsPipeline interface {
	FormReader
	FormWriter
}

// DebugTasks enqueues the debug tasks of --debug-tasks (used by the
// process-level tests): count tasks that fail ("retry", "permanent" or
// "" for none) and sleep sleepMS each.
type DebugTasks interface {
	EnqueueDebug(count int, fail string, sleepMS int) (enqueued int, err error)
}

var (
	_ GmailPipeline = (*gmail.Pipeline)(nil)
	_ RulesPipeline = (*rules.Pipeline)(nil)
	_ FormsPipeline = (*sheets.Pipeline)(nil)
)
