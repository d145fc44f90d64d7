package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"mailroom/internal/redact"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// config is every setting of the appliance. Each field is a flag with a
// MAILROOM_* environment twin; the flag wins when both are given.
type Config struct {
	DataDir        string
	HTTPAddr       string
	PublicURL      string
	TrustedProxies listValue
	RedisURL       string
	// Instance names this mailroom on its broker's lease and in a fleet
	// (default: the host name).
	Instance string
	// FleetRedisURL is the Redis the mailrooms of one Google project share
	// for the project's quotas; empty: this mailroom alone.
	FleetRedisURL string
	// External Redis for production (see queue/broker/external.go).
	RedisTLSCAFile      string
	RedisTLSCertFile    string
	RedisTLSKeyFile     string
	RedisSentinels      listValue
	RedisSentinelMaster string
	AdminPassword       string
	APIToken            string
	MetricsToken        string
	SecretKey           string

	GoogleClientID     string
	GoogleClientSecret string
	GoogleRedirectURL  string
	GoogleAPIURL       string
	GoogleTokenURL     string
	GoogleAuthURL      string
	GoogleRevokeURL    string
	GoogleCertsURL     string
	PushAudience       string
	PushServiceAccount string
	PushToken          string
	PubSubTopic        string
	AlertWebhookURL    string
	// ConnectRedirectURIs are where connect links may return (exact match).
	ConnectRedirectURIs listValue

	// EventsRetention is how long events are kept for the feed;
	// WebhookMaxAge how long a webhook batch is retried; and
	// WebhookAllowPrivate lets webhooks reach private addresses.
	EventsRetention     time.Duration
	WebhookMaxAge       time.Duration
	WebhookAllowPrivate bool

	ReclassifyDebounce time.Duration
	ReclassifyMaxWait  time.Duration
	ReclassifyTick     time.Duration
	ReclassifyBatch    int
	// ReclassifyWriteDelay is how long a reclassify's label change waits
	// for others of its label and direction to share its batchModify call.
	ReclassifyWriteDelay time.Duration
	RuleSaveLimit        int
	RuleSaveWindow       time.Duration

	SheetsFlushDelay      time.Duration
	SheetsRetention       time.Duration
	SheetsFlushThreshold  int
	SheetsWritesPerMinute int
	SheetsQuotaWindow     time.Duration // the "minute" of the Sheets quotas (tests compress it)

	SheetsReadsPerMinute         int
	SheetsProjectWritesPerMinute int
	SheetsProjectReadsPerMinute  int
	SheetsRecheckMax             time.Duration
	SheetsMaxWaiting             int

	SubmissionsPerForm int
	SubmissionsPerUser int
	SubmissionsWindow  time.Duration
	// SubmissionsUserBytes bounds the bytes one user's submissions take;
	// 0: sheets.DefaultUserBytes of the data dir's free space at start.
	SubmissionsUserBytes byteSize

	RetryInitial    time.Duration
	RetryMultiplier float64
	RetryMax        time.Duration
	MaxRetries      int

	ConcurrencyMessageAdded int
	ConcurrencyState        int
	GmailPollInterval       time.Duration
	GmailFastPollInterval   time.Duration
	GmailWatchRenew         time.Duration
	// GmailQuotaPrices names Google's Gmail price list in force (2026 or
	// 2025); GmailUserUnits is 0 for the list's per-user limit (see
	// GmailPrices and GmailUserUnitsInForce).
	GmailQuotaPrices  string
	GmailUserUnits    int
	GmailProjectUnits int
	GmailQuotaWindow  time.Duration // the "minute" of the Gmail units (tests compress it)

	// Beyond the contract.
	Demo                 bool
	DemoScale            float64
	BrokerAddr           string
	BrokerPassword       string
	RelayCap             int
	GOGC                 int
	MemoryLimit          byteSize
	TaskPollInterval     time.Duration
	DelayedCheckInterval time.Duration
	TaskServerLinger     time.Duration
	ShutdownTimeout      time.Duration
	LogLevel             string
	LogFormat            string
	DebugTasks           bool
	// TaskServersAlwaysOn keeps every queue's task server running (see
	// its flag).
	TaskServersAlwaysOn bool
}

// setting is one row of the configuration table.
type setting struct {
	flag, env, usage string
	value            flag.Value
	secret           bool // may come from $ENV_FILE; never printed
	hidden           bool
}

func (c *Config) settings() []setting {
	s := func(p *string, def string) flag.Value { *p = def; return (*stringValue)(p) }
	d := func(p *time.Duration, def time.Duration) flag.Value { *p = def; return (*durationValue)(p) }
	n := func(p *int, def int) flag.Value { *p = def; return (*intValue)(p) }
	f := func(p *float64, def float64) flag.Value { *p = def; return (*floatValue)(p) }
	b := func(p *bool, def bool) flag.Value { *p = def; return (*boolValue)(p) }
	sz := func(p *byteSize, def int64) flag.Value { *p = byteSize(def); return p }
	l := func(p *listValue) flag.Value { *p = nil; return p }
	return []setting{
		{"data-dir", "MAILROOM_DATA_DIR", "folder for the bbolt file and the secret key file", s(&c.DataDir, "./data"), false, false},
		{"http-addr", "MAILROOM_HTTP_ADDR", "listener for the admin page, the API and the push endpoint", s(&c.HTTPAddr, "127.0.0.1:8080"), false, false},
		{"public-url", "MAILROOM_PUBLIC_URL", "base URL users and Google reach mailroom at (default http:// + the listener)", s(&c.PublicURL, ""), false, false},
		{"trusted-proxies", "MAILROOM_TRUSTED_PROXIES", "comma-separated IPs or CIDRs of reverse proxies whose X-Forwarded-For names the client (the login limit counts per client address); empty: none", l(&c.TrustedProxies), false, false},
		{"instance", "MAILROOM_INSTANCE", "this mailroom's name on its broker's lease (a broker belongs to one mailroom: a second one on it refuses to start, naming the first) and in a fleet", s(&c.Instance, hostname()), false, false},
		{"fleet-redis-url", "MAILROOM_FLEET_REDIS_URL", "a Redis (redis://, rediss:// or redis-sentinel://) shared by the mailrooms of one Google project: the project's Gmail units and its Sheets reads and writes are spent there, so the fleet together stays within them (while it does not answer, each spends its share: the limits divided by the mailrooms it last saw); empty: this mailroom alone spends the project's quota", s(&c.FleetRedisURL, ""), true, false},
		{"redis-url", "MAILROOM_REDIS_URL", "external Redis (redis://[:password@]host:port/db, rediss:// for TLS, or redis-sentinel://[:password@]host:port[,host:port...]/master[/db]); empty: the embedded store", s(&c.RedisURL, ""), true, false},
		{"redis-tls-ca-file", "MAILROOM_REDIS_TLS_CA_FILE", "PEM file of the CA that signed the external Redis's certificate (rediss:// or Sentinel); empty: the system's roots", s(&c.RedisTLSCAFile, ""), false, false},
		{"redis-tls-cert-file", "MAILROOM_REDIS_TLS_CERT_FILE", "PEM client certificate for an external Redis that requires one (with --redis-tls-key-file)", s(&c.RedisTLSCertFile, ""), false, false},
		{"redis-tls-key-file", "MAILROOM_REDIS_TLS_KEY_FILE", "PEM key of the client certificate", s(&c.RedisTLSKeyFile, ""), false, false},
		{"redis-sentinels", "MAILROOM_REDIS_SENTINELS", "comma-separated host:port of Redis Sentinels that find the master (with --redis-sentinel-master); --redis-url may then give the master's password and db", l(&c.RedisSentinels), false, false},
		{"redis-sentinel-master", "MAILROOM_REDIS_SENTINEL_MASTER", "the master's name in the Sentinels' configuration", s(&c.RedisSentinelMaster, ""), false, false},
		{"admin-password", "MAILROOM_ADMIN_PASSWORD", "admin login password; unset on first start: generated and printed once", s(&c.AdminPassword, ""), true, false},
		{"api-token", "MAILROOM_API_TOKEN", "static bearer token accepted by /api/v1", s(&c.APIToken, ""), true, false},
		{"metrics-token", "MAILROOM_METRICS_TOKEN", "bearer token /metrics requires when set; empty: /metrics is open", s(&c.MetricsToken, ""), true, false},
		{"secret-key", "MAILROOM_SECRET_KEY", "base64 of 32 bytes encrypting OAuth tokens at rest (default: key file in the data dir)", s(&c.SecretKey, ""), true, false},
		{"google-client-id", "MAILROOM_GOOGLE_CLIENT_ID", "OAuth client id for connecting Gmail accounts", s(&c.GoogleClientID, ""), false, false},
		{"google-client-secret", "MAILROOM_GOOGLE_CLIENT_SECRET", "OAuth client secret", s(&c.GoogleClientSecret, ""), true, false},
		{"google-redirect-url", "MAILROOM_GOOGLE_REDIRECT_URL", "OAuth redirect URL (default: public URL + /oauth/google/callback)", s(&c.GoogleRedirectURL, ""), false, false},
		{"google-api-url", "MAILROOM_GOOGLE_API_URL", "base URL serving Gmail and Sheets (default: Google's)", s(&c.GoogleAPIURL, ""), false, false},
		{"google-token-url", "MAILROOM_GOOGLE_TOKEN_URL", "OAuth2 token endpoint (default: Google's)", s(&c.GoogleTokenURL, ""), false, false},
		{"google-auth-url", "MAILROOM_GOOGLE_AUTH_URL", "OAuth2 authorization endpoint that the admin page's connect and connect links send browsers to (default: Google's, https://accounts.google.com/o/oauth2/v2/auth)", s(&c.GoogleAuthURL, ""), false, false},
		{"connect-redirect-uris", "MAILROOM_CONNECT_REDIRECT_URIS", "comma-separated redirect URIs a connect link may return to (exact match); empty: the API makes no connect links", l(&c.ConnectRedirectURIs), false, false},
		{"google-revoke-url", "MAILROOM_GOOGLE_REVOKE_URL", "OAuth2 revocation endpoint, called when an account is deleted or a connect link ends in wrong_user (default: Google's, or \"revoke\" next to a token URL ending in /token)", s(&c.GoogleRevokeURL, ""), false, false},
		{"google-certs-url", "MAILROOM_GOOGLE_CERTS_URL", "JWKS verifying push OIDC tokens (default: Google's)", s(&c.GoogleCertsURL, ""), false, false},
		{"push-audience", "MAILROOM_PUSH_AUDIENCE", "required aud of the push OIDC token", s(&c.PushAudience, ""), false, false},
		{"push-service-account", "MAILROOM_PUSH_SERVICE_ACCOUNT", "required email claim of the push OIDC token", s(&c.PushServiceAccount, ""), false, false},
		{"push-token", "MAILROOM_PUSH_TOKEN", "shared secret accepted as ?token= on the push URL", s(&c.PushToken, ""), true, false},
		{"pubsub-topic", "MAILROOM_PUBSUB_TOPIC", "projects/P/topics/T for users.watch; empty: polling only", s(&c.PubSubTopic, ""), false, false},
		{"alert-webhook-url", "MAILROOM_ALERT_WEBHOOK_URL", "Discord- or Slack-compatible webhook for dead-letter alerts", s(&c.AlertWebhookURL, ""), true, false},
		{"reclassify-debounce", "MAILROOM_RECLASSIFY_DEBOUNCE", "quiet time after the last rule save before reclassify starts", d(&c.ReclassifyDebounce, rules.DefaultDebounce), false, false},
		{"reclassify-max-wait", "MAILROOM_RECLASSIFY_MAX_WAIT", "reclassify starts at the latest this long after the first unsent save", d(&c.ReclassifyMaxWait, rules.DefaultMaxWait), false, false},
		{"reclassify-tick", "MAILROOM_RECLASSIFY_TICK", "how often due reclassify jobs are looked for", d(&c.ReclassifyTick, rules.DefaultTick), false, false},
		{"reclassify-batch", "MAILROOM_RECLASSIFY_BATCH", "threads per reclassify batch task", n(&c.ReclassifyBatch, rules.DefaultBatchSize), false, false},
		{"reclassify-write-delay", "MAILROOM_RECLASSIFY_WRITE_DELAY", "the longest a reclassify's label change waits for others to share its batchModify call", d(&c.ReclassifyWriteDelay, rules.DefaultWriteDelay), false, false},
		{"rule-save-limit", "MAILROOM_RULE_SAVE_LIMIT", "rule saves allowed per user per window", n(&c.RuleSaveLimit, rules.DefaultSaveLimit), false, false},
		{"rule-save-window", "MAILROOM_RULE_SAVE_WINDOW", "the sliding window of the rule save limit", d(&c.RuleSaveWindow, rules.DefaultSaveWindow), false, false},
		{"sheets-flush-delay", "MAILROOM_SHEETS_FLUSH_DELAY", "a sheet's buffer is flushed at most this long after its first unsent row", d(&c.SheetsFlushDelay, sheets.DefaultFlushDelay), false, false},
		{"sheets-flush-threshold", "MAILROOM_SHEETS_FLUSH_THRESHOLD", "a buffer this full is flushed at once; the most rows one write carries", n(&c.SheetsFlushThreshold, sheets.DefaultThreshold), false, false},
		{"sheets-writes-per-minute", "MAILROOM_SHEETS_WRITES_PER_MINUTE", "Sheets write calls per minute per Google account", n(&c.SheetsWritesPerMinute, sheets.DefaultWritesPerMinute), false, false},
		{"sheets-reads-per-minute", "MAILROOM_SHEETS_READS_PER_MINUTE", "Sheets read calls per minute per Google account", n(&c.SheetsReadsPerMinute, sheets.DefaultReadsPerMinute), false, false},
		{"sheets-project-writes-per-minute", "MAILROOM_SHEETS_PROJECT_WRITES_PER_MINUTE", "Sheets write calls per minute for the whole Google Cloud project", n(&c.SheetsProjectWritesPerMinute, sheets.DefaultProjectWritesPerMinute), false, false},
		{"sheets-project-reads-per-minute", "MAILROOM_SHEETS_PROJECT_READS_PER_MINUTE", "Sheets read calls per minute for the whole Google Cloud project", n(&c.SheetsProjectReadsPerMinute, sheets.DefaultProjectReadsPerMinute), false, false},
		{"sheets-recheck-max", "MAILROOM_SHEETS_RECHECK_MAX", "longest wait between two checks of a form whose sheet is gone, unshared, missing its tab or full (the first after a twentieth of it, doubling)", d(&c.SheetsRecheckMax, sheets.DefaultRecheckMax), false, false},
		{"webhook-max-age", "MAILROOM_WEBHOOK_MAX_AGE", "how long a webhook batch is retried before it goes to the dead letters", d(&c.WebhookMaxAge, webhooks.DefaultMaxAge), false, false},
		{"webhook-allow-private", "MAILROOM_WEBHOOK_ALLOW_PRIVATE", "allow webhook URLs that resolve to loopback, private or link-local addresses (a receiver on this host or network)", b(&c.WebhookAllowPrivate, false), false, false},
		{"events-retention", "MAILROOM_EVENTS_RETENTION", "how long events are kept for GET /api/v1/events (older ones are pruned in the background)", d(&c.EventsRetention, 168*time.Hour), false, false},
		{"sheets-retention", "MAILROOM_SHEETS_RETENTION", "a submission whose row is in its sheet is deleted this long after it came; 0 keeps them", d(&c.SheetsRetention, 30*24*time.Hour), false, false},
		{"sheets-max-waiting", "MAILROOM_SHEETS_MAX_WAITING", "rows that may wait to be written for one form (a form in error keeps them); past it the form refuses submissions with 409 form_backlog_full", n(&c.SheetsMaxWaiting, sheets.DefaultMaxWaiting), false, false},
		{"submissions-per-form", "MAILROOM_SUBMISSIONS_PER_FORM", "submissions one form accepts at once (a burst); the allowance refills at this many per --submissions-window, and past it submissions are answered 429", n(&c.SubmissionsPerForm, sheets.DefaultSubmitsPerForm), false, false},
		{"submissions-per-user", "MAILROOM_SUBMISSIONS_PER_USER", "the same for all the forms of one user together", n(&c.SubmissionsPerUser, sheets.DefaultSubmitsPerUser), false, false},
		{"submissions-window", "MAILROOM_SUBMISSIONS_WINDOW", "the time in which a submission allowance refills from empty", d(&c.SubmissionsWindow, sheets.DefaultSubmitWindow), false, false},
		{"submissions-user-bytes", "MAILROOM_SUBMISSIONS_USER_BYTES", "bytes the submissions of one user's forms may take in the data file, waiting or written and kept (e.g. 2GiB); past it they are answered 429; 0: a tenth of the data dir's free space at start, between 64MiB and 4GiB", sz(&c.SubmissionsUserBytes, 0), false, false},
		{"sheets-quota-window", "MAILROOM_SHEETS_QUOTA_WINDOW", "the window of --sheets-writes-per-minute (tests compress the minute)", d(&c.SheetsQuotaWindow, sheets.DefaultQuotaWindow), false, true},
		{"retry-initial", "MAILROOM_RETRY_INITIAL", "first retry delay of a failed task", d(&c.RetryInitial, queue.DefaultRetryInitial), false, false},
		{"retry-multiplier", "MAILROOM_RETRY_MULTIPLIER", "growth of the retry delay per failure", f(&c.RetryMultiplier, queue.DefaultRetryMultiplier), false, false},
		{"retry-max", "MAILROOM_RETRY_MAX", "longest retry delay", d(&c.RetryMax, queue.DefaultRetryMax), false, false},
		{"max-retries", "MAILROOM_MAX_RETRIES", "retries after the first failed attempt before a task is dead-lettered", n(&c.MaxRetries, 3), false, false},
		{"concurrency-message-added", "MAILROOM_CONCURRENCY_MESSAGE_ADDED", "workers of the message-added queue", n(&c.ConcurrencyMessageAdded, 3), false, false},
		{"concurrency-state", "MAILROOM_CONCURRENCY_STATE", "workers of each state-change queue", n(&c.ConcurrencyState, 5), false, false},
		{"gmail-poll-interval", "MAILROOM_GMAIL_POLL_INTERVAL", "each account whose pushes arrive is also synced this often without a push", d(&c.GmailPollInterval, gmail.DefaultPollInterval), false, false},
		{"gmail-fast-poll-interval", "MAILROOM_GMAIL_FAST_POLL_INTERVAL", "an account whose pushes have stopped (a poll found changes no push announced) or never came is synced this often", d(&c.GmailFastPollInterval, gmail.DefaultFastPollInterval), false, false},
		{"gmail-watch-renew", "MAILROOM_GMAIL_WATCH_RENEW", "how often users.watch is renewed", d(&c.GmailWatchRenew, gmail.DefaultWatchRenew), false, false},
		{"gmail-quota-prices", "MAILROOM_GMAIL_QUOTA_PRICES", "Google's Gmail price list in force for the project: 2026 (projects created since May 1, 2026: messages.get 20, threads.get 40, 6000 units a user a minute) or 2025 (projects that used the API between November 2025 and April 2026: the earlier table, 15000 a user a minute); every budget, page, metric and estimate uses it", s(&c.GmailQuotaPrices, google.DefaultPrices), false, false},
		{"gmail-user-units-per-minute", "MAILROOM_GMAIL_USER_UNITS_PER_MINUTE", "Gmail quota units per minute per Google account, shared by every pipeline; 0: the price list's (6000 for 2026, 15000 for 2025)", n(&c.GmailUserUnits, 0), false, false},
		{"gmail-project-units-per-minute", "MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE", "Gmail quota units per minute for the whole project, shared fairly between accounts", n(&c.GmailProjectUnits, google.DefaultProjectUnitsPerMinute), false, false},
		{"gmail-quota-window", "MAILROOM_GMAIL_QUOTA_WINDOW", "the window of the Gmail units per minute (tests compress the minute)", d(&c.GmailQuotaWindow, google.DefaultWindow), false, true},
		{"demo", "MAILROOM_DEMO", "run with a built-in simulated Google and a traffic generator", b(&c.Demo, false), false, false},
		{"demo-scale", "MAILROOM_DEMO_SCALE", "share of the demo's mailbox sizes (tests use a small one)", f(&c.DemoScale, 1), false, true},
		{"broker-addr", "MAILROOM_BROKER_ADDR", "expose the embedded broker on this loopback address (for redis-cli); empty: no port", s(&c.BrokerAddr, ""), false, false},
		{"broker-password", "MAILROOM_BROKER_PASSWORD", "password of the exposed embedded broker", s(&c.BrokerPassword, ""), true, false},
		{"relay-cap", "MAILROOM_RELAY_CAP", "most tasks of one queue held in the broker; the rest wait in bbolt", n(&c.RelayCap, queue.DefaultRelayCap), false, false},
		{"gogc", "MAILROOM_GOGC", "garbage collector target percent (GOGC) for the process; 0 keeps Go's default", n(&c.GOGC, 400), false, false},
		{"memory-limit", "MAILROOM_MEMORY_LIMIT", "soft memory limit of the Go heap (GOMEMLIMIT), e.g. 64MiB; 0: none", sz(&c.MemoryLimit, 64<<20), false, false},
		{"task-poll-interval", "MAILROOM_TASK_POLL_INTERVAL", "how often an idle queue server looks for work", d(&c.TaskPollInterval, queue.DefaultPollInterval), false, false},
		{"delayed-check-interval", "MAILROOM_DELAYED_CHECK_INTERVAL", "how often scheduled and retrying tasks are made ready", d(&c.DelayedCheckInterval, queue.DefaultDelayedCheckInterval), false, false},
		{"task-server-linger", "MAILROOM_TASK_SERVER_LINGER", "a queue's task server stops this long after the queue last had work, and starts again when work comes", d(&c.TaskServerLinger, queue.DefaultServerLinger), false, false},
		{"task-servers-always-on", "MAILROOM_TASK_SERVERS_ALWAYS_ON", "keep every queue's task server running even with nothing to do: asynq's own tools (the asynq CLI, Asynqmon) on an external Redis or --broker-addr then list every queue's server at all times, and a task that comes after a quiet spell does not wait for its server to start; the cost is idle CPU (mailroom bench idle measures it)", b(&c.TaskServersAlwaysOn, false), false, false},
		{"shutdown-timeout", "MAILROOM_SHUTDOWN_TIMEOUT", "how long running tasks may take to finish at shutdown", d(&c.ShutdownTimeout, queue.DefaultShutdownTimeout), false, false},
		{"log-level", "MAILROOM_LOG_LEVEL", "debug, info, warn or error", s(&c.LogLevel, "info"), false, false},
		{"log-format", "MAILROOM_LOG_FORMAT", "text or json", s(&c.LogFormat, "text"), false, false},
		{"debug-tasks", "MAILROOM_DEBUG_TASKS", "enable the debug:record task type and its API (tests, benchmarks)", b(&c.DebugTasks, false), false, true},
	}
}

// secrets are the values of the secret settings (the rows marked secret),
// hidden from every log line and error (TestSecretsCoverEverySecretSetting
// checks that none is left out). The token URL is not a secret but may
// carry credentials in its user info; redact hides those in any URL.
func (c *Config) secrets() []string {
	return []string{c.RedisURL, c.FleetRedisURL, c.AdminPassword, c.APIToken, c.SecretKey, c.GoogleClientSecret, c.PushToken, c.AlertWebhookURL, c.BrokerPassword, c.MetricsToken}
}

// Redactor hides the secrets of c.
func (c *Config) Redactor() *redact.Redactor { return redact.New(c.secrets()...) }

// ParseConfig reads the environment, then the flags, then validates. A bad
// value is one line naming its flag and its variable; -h prints the flags.
func ParseConfig(name string, args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line, not the flag list
	var flagErr error
	for _, s := range c.settings() {
		v, err := s.fromEnv(getenv)
		if err != nil {
			return nil, err
		}
		if v != "" {
			if err := s.value.Set(v); err != nil {
				return nil, s.invalid(v, err)
			}
		}
		usage := s.usage + " (" + s.env + ")"
		if s.hidden {
			usage = "(internal) " + usage
		}
		fs.Var(&settingValue{s: s, first: &flagErr}, s.flag, usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return nil, err
		}
		if flagErr != nil {
			return nil, flagErr
		}
		return nil, fmt.Errorf("%w (run \"mailroom %s -h\" for the flags)", err, name)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// fromEnv is the setting's value in the environment: its MAILROOM_*
// variable, or for a secret the content of the file $ENV_FILE names;
// empty when neither is set.
func (s setting) fromEnv(getenv func(string) string) (string, error) {
	v := getenv(s.env)
	if v == "" && s.secret {
		if path := getenv(s.env + "_FILE"); path != "" {
			raw, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("%s_FILE: %w", s.env, err)
			}
			v = strings.TrimSpace(string(raw))
		}
	}
	return v, nil
}

// Setting is one setting of serve's table, by flag name, for the commands
// that read a few of serve's settings without serving (backup, compact):
// its value from the environment, else its default, and its variable's
// name. It does not validate the value.
func Setting(flagName string, getenv func(string) string) (value, env string, err error) {
	for _, s := range (&Config{}).settings() {
		if s.flag != flagName {
			continue
		}
		v, err := s.fromEnv(getenv)
		if err != nil {
			return "", s.env, err
		}
		if v == "" {
			v = s.value.String()
		}
		return v, s.env, nil
	}
	return "", "", fmt.Errorf("config: no setting --%s", flagName)
}

// invalid is the error of a value the setting cannot take (a secret's
// value is not repeated).
func (s setting) invalid(v string, err error) error {
	msg := err.Error()
	if !s.secret {
		msg = fmt.Sprintf("%q: %s", v, msg)
	}
	return &configError{flag: s.flag, env: s.env, msg: msg}
}

// settingValue is a setting's flag: it keeps the first value it refused,
// named by flag and variable, for ParseConfig to return.
type settingValue struct {
	s     setting
	first *error
}

func (v *settingValue) Set(x string) error {
	err := v.s.value.Set(x)
	if err != nil && *v.first == nil {
		*v.first = v.s.invalid(x, err)
	}
	return err
}

func (v *settingValue) String() string {
	if v == nil || v.s.value == nil {
		return "" // the flag package's zero value, for its defaults
	}
	return v.s.value.String()
}

func (v *settingValue) IsBoolFlag() bool {
	b, ok := v.s.value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// minAPITokenLen is the shortest static API token accepted.
const minAPITokenLen = 32

// configError names the offending setting by flag and environment name.
type configError struct {
	flag, env, msg string
}

func (e *configError) Error() string {
	return fmt.Sprintf("invalid --%s (%s): %s", e.flag, e.env, e.msg)
}

// Validate checks every setting and names the flag of the first bad one.
func (c *Config) Validate() error {
	for _, check := range []func() error{c.validateAddresses, c.validateTimings, c.validateCounts, c.validateBroker, c.validateLogging, c.validateSecrets} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// bad names the offending setting by flag and environment name.
func bad(flagName, msg string) error {
	for _, s := range new(Config).settings() {
		if s.flag == flagName {
			return &configError{flag: s.flag, env: s.env, msg: msg}
		}
	}
	return errors.New(flagName + ": " + msg)
}

// validateAddresses checks the paths, addresses, URLs and Google names.
func (c *Config) validateAddresses() error {
	if c.DataDir == "" {
		return bad("data-dir", "must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return bad("http-addr", "want host:port, "+err.Error())
	}
	for _, u := range []struct{ flag, val string }{
		{"public-url", c.PublicURL}, {"google-redirect-url", c.GoogleRedirectURL}, {"google-api-url", c.GoogleAPIURL},
		{"google-token-url", c.GoogleTokenURL}, {"google-auth-url", c.GoogleAuthURL}, {"google-revoke-url", c.GoogleRevokeURL}, {"google-certs-url", c.GoogleCertsURL}, {"alert-webhook-url", c.AlertWebhookURL},
	} {
		if u.val == "" {
			continue
		}
		p, err := url.Parse(u.val)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return bad(u.flag, "want an absolute http(s) URL")
		}
	}
	for _, r := range c.ConnectRedirectURIs {
		p, err := url.Parse(r)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.Fragment != "" {
			return bad("connect-redirect-uris", fmt.Sprintf("%q is not an absolute http(s) URL without a fragment", r))
		}
	}
	for _, p := range c.TrustedProxies {
		if net.ParseIP(p) == nil {
			if _, _, err := net.ParseCIDR(p); err != nil {
				return bad("trusted-proxies", fmt.Sprintf("%q is neither an IP address nor a CIDR; want a comma-separated list such as 127.0.0.1,10.0.0.0/8", p))
			}
		}
	}
	if c.RedisURL != "" && !strings.HasPrefix(c.RedisURL, "redis-sentinel://") {
		p, err := url.Parse(c.RedisURL)
		if err != nil || (p.Scheme != "redis" && p.Scheme != "rediss") || p.Host == "" {
			return bad("redis-url", "want redis://[:password@]host:port/db, rediss://... or redis-sentinel://host:port[,host:port...]/master[/db]")
		}
	}
	if c.FleetRedisURL != "" && !strings.HasPrefix(c.FleetRedisURL, "redis-sentinel://") {
		p, err := url.Parse(c.FleetRedisURL)
		if err != nil || (p.Scheme != "redis" && p.Scheme != "rediss") || p.Host == "" {
			return bad("fleet-redis-url", "want redis://[:password@]host:port/db, rediss://... or redis-sentinel://host:port[,host:port...]/master[/db]")
		}
	}
	if (len(c.RedisSentinels) == 0) != (c.RedisSentinelMaster == "") {
		return bad("redis-sentinels", "set both --redis-sentinels and --redis-sentinel-master (MAILROOM_REDIS_SENTINEL_MASTER), or neither")
	}
	for _, a := range c.RedisSentinels {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return bad("redis-sentinels", fmt.Sprintf("%q is not host:port", a))
		}
	}
	if (c.RedisTLSCertFile == "") != (c.RedisTLSKeyFile == "") {
		return bad("redis-tls-cert-file", "set both --redis-tls-cert-file and --redis-tls-key-file (MAILROOM_REDIS_TLS_KEY_FILE), or neither")
	}
	if (c.RedisTLSCAFile != "" || c.RedisTLSCertFile != "") && c.RedisURL == "" && len(c.RedisSentinels) == 0 {
		return bad("redis-tls-ca-file", "the TLS files are for an external Redis: set MAILROOM_REDIS_URL (rediss://) or the Sentinels")
	}
	if c.SecretKey != "" {
		if _, err := store.ParseKey(c.SecretKey); err != nil {
			return bad("secret-key", err.Error())
		}
	}
	if c.PubSubTopic != "" {
		parts := strings.Split(c.PubSubTopic, "/")
		if len(parts) != 4 || parts[0] != "projects" || parts[2] != "topics" || parts[1] == "" || parts[3] == "" {
			return bad("pubsub-topic", "want projects/PROJECT/topics/TOPIC")
		}
	}
	if (c.GoogleClientID == "") != (c.GoogleClientSecret == "") {
		return bad("google-client-secret", "set both the OAuth client id and secret, or neither")
	}
	return nil
}

// validateSecrets checks the API token's length and that a push audience
// names the one service account allowed to sign for it.
func (c *Config) validateSecrets() error {
	if c.APIToken != "" && strings.IndexFunc(c.APIToken, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		// A bearer token cannot carry them (the header's spaces are
		// trimmed), and spaces alone are no secret.
		return bad("api-token", "must not contain spaces, tabs or other whitespace or control characters; make one with: openssl rand -hex 32")
	}
	if c.APIToken != "" && len(c.APIToken) < minAPITokenLen {
		return bad("api-token", fmt.Sprintf("must be at least %d characters; make one with: openssl rand -hex 32", minAPITokenLen))
	}
	if c.PushAudience != "" && c.PushServiceAccount == "" && !c.Demo {
		return bad("push-service-account", "required when --push-audience (MAILROOM_PUSH_AUDIENCE) is set: without it any Google service account can mint a push token for the audience")
	}
	return nil
}

// validateTimings checks the durations and how they relate.
func (c *Config) validateTimings() error {
	positive := []struct {
		flag string
		d    time.Duration
	}{
		{"reclassify-debounce", c.ReclassifyDebounce}, {"reclassify-max-wait", c.ReclassifyMaxWait},
		{"reclassify-tick", c.ReclassifyTick}, {"rule-save-window", c.RuleSaveWindow},
		{"reclassify-write-delay", c.ReclassifyWriteDelay},
		{"sheets-flush-delay", c.SheetsFlushDelay}, {"sheets-quota-window", c.SheetsQuotaWindow}, {"sheets-recheck-max", c.SheetsRecheckMax}, {"submissions-window", c.SubmissionsWindow}, {"retry-initial", c.RetryInitial}, {"retry-max", c.RetryMax},
		{"gmail-poll-interval", c.GmailPollInterval}, {"gmail-fast-poll-interval", c.GmailFastPollInterval}, {"gmail-watch-renew", c.GmailWatchRenew}, {"gmail-quota-window", c.GmailQuotaWindow},
		{"task-poll-interval", c.TaskPollInterval}, {"delayed-check-interval", c.DelayedCheckInterval},
		{"task-server-linger", c.TaskServerLinger}, {"shutdown-timeout", c.ShutdownTimeout},
		{"events-retention", c.EventsRetention}, {"webhook-max-age", c.WebhookMaxAge},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return bad(p.flag, "must be a positive duration such as 10s or 5m")
		}
	}
	if c.SheetsRetention < 0 {
		return bad("sheets-retention", "must be 0 (keep for ever) or a positive duration such as 720h")
	}
	if c.ReclassifyMaxWait < c.ReclassifyDebounce {
		return bad("reclassify-max-wait", "must not be shorter than --reclassify-debounce")
	}
	if c.RetryMax < c.RetryInitial {
		return bad("retry-max", "must not be shorter than --retry-initial")
	}
	if c.GmailWatchRenew > 7*24*time.Hour {
		return bad("gmail-watch-renew", "must be under 7 days (Google expires a watch after 7)")
	}
	return nil
}

// validateCounts checks the numbers.
func (c *Config) validateCounts() error {
	ints := []struct {
		flag   string
		v, min int
		max    int
	}{
		{"reclassify-batch", c.ReclassifyBatch, 1, 1000},
		{"rule-save-limit", c.RuleSaveLimit, 1, 1 << 20},
		{"sheets-flush-threshold", c.SheetsFlushThreshold, 1, 10000},
		{"sheets-max-waiting", c.SheetsMaxWaiting, 1, 1 << 30},
		{"submissions-per-form", c.SubmissionsPerForm, 1, 1 << 30},
		{"submissions-per-user", c.SubmissionsPerUser, 1, 1 << 30},
		{"sheets-writes-per-minute", c.SheetsWritesPerMinute, 1, 1 << 20},
		{"sheets-reads-per-minute", c.SheetsReadsPerMinute, 1, 1 << 20},
		{"sheets-project-writes-per-minute", c.SheetsProjectWritesPerMinute, 1, 1 << 20},
		{"sheets-project-reads-per-minute", c.SheetsProjectReadsPerMinute, 1, 1 << 20},
		{"gmail-project-units-per-minute", c.GmailProjectUnits, 100, 1 << 30},
		{"max-retries", c.MaxRetries, 0, 100},
		{"concurrency-message-added", c.ConcurrencyMessageAdded, 1, 1000},
		{"concurrency-state", c.ConcurrencyState, 1, 1000},
		{"relay-cap", c.RelayCap, 1, 1 << 20},
		{"gogc", c.GOGC, 0, 10000},
	}
	for _, i := range ints {
		if i.v < i.min || i.v > i.max {
			return bad(i.flag, fmt.Sprintf("must be between %d and %d, got %d", i.min, i.max, i.v))
		}
	}
	if c.GmailUserUnits != 0 && (c.GmailUserUnits < 100 || c.GmailUserUnits > 1<<30) {
		return bad("gmail-user-units-per-minute", fmt.Sprintf("must be between 100 and %d (or 0: the price list's), got %d", 1<<30, c.GmailUserUnits))
	}
	if _, err := google.PricesFor(c.GmailQuotaPrices); err != nil || c.GmailQuotaPrices == "" {
		return bad("gmail-quota-prices", fmt.Sprintf("%q is not a Gmail price list: want one of %s", c.GmailQuotaPrices, strings.Join(google.PriceListNames(), ", ")))
	}
	if c.DemoScale <= 0 || c.DemoScale > 1 {
		return bad("demo-scale", "must be above 0 and at most 1")
	}
	if c.RetryMultiplier < 1 || c.RetryMultiplier > 100 {
		return bad("retry-multiplier", "must be between 1 and 100")
	}
	return nil
}

// hostname is the default instance name: the host's name, or "mailroom"
// when it has none.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "mailroom"
}

// validateBroker checks the instance name and the exposed embedded broker.
func (c *Config) validateBroker() error {
	if c.Instance == "" || len(c.Instance) > 100 || strings.ContainsFunc(c.Instance, unicode.IsControl) {
		return bad("instance", "want a name of 1 to 100 printable characters")
	}
	if c.BrokerAddr != "" {
		if c.RedisURL != "" {
			return bad("broker-addr", "only applies to the embedded broker; unset --redis-url or this")
		}
		host, _, err := net.SplitHostPort(c.BrokerAddr)
		if err != nil {
			return bad("broker-addr", "want host:port")
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return bad("broker-addr", "must be a loopback address")
		}
		if c.BrokerPassword == "" {
			return bad("broker-password", "required when --broker-addr is set")
		}
	}
	return nil
}

// validateLogging checks the log level and format.
func (c *Config) validateLogging() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return bad("log-level", "want debug, info, warn or error")
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return bad("log-format", "want text or json")
	}
	return nil
}

// publicURL is the configured public URL or one made from the listener.
func (c *Config) BaseURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	return "http://" + c.HTTPAddr
}

// redirectURL is the OAuth redirect URL: the configured one, or the public
// URL's callback.
func (c *Config) redirectURL() string {
	if c.GoogleRedirectURL != "" {
		return c.GoogleRedirectURL
	}
	return c.BaseURL() + "/oauth/google/callback"
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

// listValue is a comma-separated list; blank items are left out.
type listValue []string

func (v *listValue) Set(s string) error {
	*v = nil
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*v = append(*v, item)
		}
	}
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (use Go syntax such as 60s or 5m)")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// GmailPrices returns the Gmail price list in force
// (MAILROOM_GMAIL_QUOTA_PRICES; a config that did not validate gets the
// default list).
func (c *Config) GmailPrices() google.Prices {
	p, err := google.PricesFor(c.GmailQuotaPrices)
	if err != nil {
		return google.MustPrices(google.DefaultPrices)
	}
	return p
}

// GmailUserUnitsInForce returns the Gmail units a user a minute the
// budget spends: MAILROOM_GMAIL_USER_UNITS_PER_MINUTE, or when unset (0)
// the price list's.
func (c *Config) GmailUserUnitsInForce() int {
	if c.GmailUserUnits > 0 {
		return c.GmailUserUnits
	}
	return c.GmailPrices().UserUnitsPerMinute
}

// Defaults is the configuration with every setting at its default.
func Defaults() *Config {
	c := &Config{}
	c.settings()
	return c
}
