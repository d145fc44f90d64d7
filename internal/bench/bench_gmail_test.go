package bench

import (
	"context"
	"strings"
	"testing"
)

// TestBenchGmailThroughputQuick runs gmail-throughput in its quick form:
// every record of the many-account bursts is applied (the run fails
// otherwise), the quota-on rows are there, and at serve's defaults the few
// hundred units of each account draw no refusal from the emulator, which
// stands at Google's limits. Rates are logged, not judged.
func TestBenchGmailThroughputQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenario")
	}
	r, err := benchGmailThroughput(context.Background(), Options{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	quotaOn, floors, webhook := 0, 0, 0
	for _, m := range r.Metrics {
		t.Logf("%s = %.2f %s %s", m.Name, m.Value, m.Unit, m.Target)
		switch {
		case strings.HasSuffix(m.Name, "one webhook taking every event"):
			webhook++
		case strings.HasPrefix(m.Name, "Google quota refusals"):
			if m.Value != 0 {
				t.Errorf("%s = %v, want 0", m.Name, m.Value)
			}
		case strings.Contains(m.Name, "Gmail quota on") && strings.HasPrefix(m.Name, "history records/s"):
			quotaOn++
		case strings.HasPrefix(m.Name, "quota floor"):
			floors++
			if m.Value <= 0 {
				t.Errorf("%s = %v", m.Name, m.Value)
			}
		}
	}
	if quotaOn == 0 || floors != 3 || webhook != 1 {
		t.Errorf("%d quota-on rate rows, %d floors and %d rows with a webhook, want at least one, 3 and 1", quotaOn, floors, webhook)
	}
}
