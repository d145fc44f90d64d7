package google

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/api/googleapi"
)

// Gmail quota units per call, Google's per-method table
// (developers.google.com/workspace/gmail/api/reference/quota). The one
// copy of it: limiters and benchmarks use these.
const (
	GmailUnitsProfile     = 1
	GmailUnitsList        = 5
	GmailUnitsGet         = 5
	GmailUnitsHistory     = 2
	GmailUnitsLabelsList  = 1
	GmailUnitsLabelCreate = 5
	GmailUnitsModify      = 5
	GmailUnitsBatchModify = 50
	GmailUnitsWatch       = 100
	GmailUnitsStop        = 50
)

// The api label values of mailroom_google_rate_limited_total.
const (
	APIGmail  = "gmail"
	APISheets = "sheets"
)

// Metrics counts what Google's quotas see: the Gmail units spent and the
// answers in which Google refused for quota. Give one to Config.Metrics;
// a nil *Metrics counts nothing.
type Metrics struct {
	gmailUnits  prometheus.Counter
	rateLimited *prometheus.CounterVec
}

// NewMetrics registers mailroom_gmail_quota_units_total and
// mailroom_google_rate_limited_total{api} (with a zero sample for gmail
// and sheets) on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		gmailUnits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_quota_units_total",
			Help: "Gmail quota units spent, by Google's per-method table (each request sent counts, retries included).",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_google_rate_limited_total",
			Help: "Google answers refusing for quota: 429, or 403 with a rate-limit reason.",
		}, []string{"api"}),
	}
	m.rateLimited.WithLabelValues(APIGmail)
	m.rateLimited.WithLabelValues(APISheets)
	for _, c := range []prometheus.Collector{m.gmailUnits, m.rateLimited} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// SpendGmail counts units of Gmail quota spent.
func (m *Metrics) SpendGmail(units int) {
	if m != nil && units > 0 {
		m.gmailUnits.Add(float64(units))
	}
}

// refused counts err when it is Google refusing for quota.
func (m *Metrics) refused(api string, err error) {
	if m != nil && quotaRefusal(err) {
		m.rateLimited.WithLabelValues(api).Inc()
	}
}

// quotaRefusal reports whether err is an API answer refusing for quota:
// 429, or 403 with a rate-limit reason.
func quotaRefusal(err error) bool {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return false
	}
	return ge.Code == http.StatusTooManyRequests || (ge.Code == http.StatusForbidden && rateLimitReason(ge))
}

// metered wraps one request: its Gmail units are counted when it is sent,
// and a quota refusal when it comes back.
func (c *Client) metered(api string, units int, fn func() error) func() error {
	return func() error {
		c.cfg.Metrics.SpendGmail(units)
		err := fn()
		c.cfg.Metrics.refused(api, err)
		return err
	}
}
