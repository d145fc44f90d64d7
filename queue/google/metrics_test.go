package google

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"mailroom/queue"
	"mailroom/queue/google/googlefake"
)

// TestMetricsCountUnitsAndQuotaRefusals: every Gmail request sent adds its
// method's units, and answers refusing for quota (429, 403
// rateLimitExceeded) are counted per API; other errors are not.
func TestMetricsCountUnitsAndQuotaRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	book, err := fake.Sheets.CreateSpreadsheet(ann, "Forms", "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		n += len(f.GetMetric())
	}
	if n != 3 {
		t.Fatalf("series before any call: %d, want 3 (units, gmail, sheets)", n)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Metrics: m})
	ts := c.TokenSource(Token{RefreshToken: refresh}, nil)
	g, err := c.Gmail(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := c.Sheets(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	value := func(c prometheus.Counter) float64 {
		var d dto.Metric
		if err := c.Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetCounter().GetValue()
	}
	units := func() float64 { return value(m.gmailUnits) }
	limited := func(api string) float64 { return value(m.rateLimited.WithLabelValues(api)) }

	if _, _, err := g.Profile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Labels(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.ListMessages(ctx, "", 10); err != nil {
		t.Fatal(err)
	}
	if got, want := units(), float64(GmailUnitsProfile+GmailUnitsLabelsList+GmailUnitsList); got != want {
		t.Errorf("units after profile, labels and list: %v, want %v", got, want)
	}

	// A 429 and a 403 rateLimitExceeded are quota refusals (and still cost
	// their units: the request was sent); a 503 is not.
	before := units()
	for _, code := range []int{429, 403, 503} {
		if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodHistoryList, Code: code, Times: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := g.History(ctx, 1, "", 10); err == nil {
			t.Fatalf("history with a %d fault: no error", code)
		}
	}
	if got := limited(APIGmail); got != 2 {
		t.Errorf("gmail refusals %v, want 2", got)
	}
	if got, want := units()-before, float64(3*GmailUnitsHistory); got != want {
		t.Errorf("units of three refused history calls: %v, want %v", got, want)
	}
	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, Code: 403, Reason: "forbidden", Times: 1}); err != nil {
		t.Fatal(err)
	}
	_, _ = g.GetMessage(ctx, "nope", false)
	if got := limited(APIGmail); got != 2 {
		t.Errorf("a plain 403 counted as a refusal: %v", got)
	}

	// Sheets: a 429 counts for sheets, and no Gmail units.
	before = units()
	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 429, Times: 1}); err != nil {
		t.Fatal(err)
	}
	err = sh.WriteRange(ctx, book, "Sheet1!A1:B1", [][]string{{"a", "b"}})
	if _, ok := queue.RetryAfter(err); !ok {
		t.Fatalf("sheets 429: %v, want rate limited", err)
	}
	if err := sh.WriteRange(ctx, book, "Sheet1!A1:B1", [][]string{{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	if got := limited(APISheets); got != 1 {
		t.Errorf("sheets refusals %v, want 1", got)
	}
	if got := limited(APIGmail); got != 2 {
		t.Errorf("gmail refusals changed by Sheets calls: %v", got)
	}
	if units() != before {
		t.Errorf("Sheets calls spent Gmail units: %v", units()-before)
	}
}
