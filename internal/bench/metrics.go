package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// metricSum scrapes the app's /metrics at addr (open: the benchmarks set
// no MAILROOM_METRICS_TOKEN) and returns the sum of every series of the
// metric name, as a user's Prometheus would see it.
func metricSum(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: /metrics answered %s", name, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue // another metric, or a comment
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			return 0, fmt.Errorf("scrape %s: no value in %q", name, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("scrape %s: %q: %w", name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	return sum, nil
}

// gmailEventsHandled is mailroom_gmail_events_total over every type and
// outcome: the Gmail event tasks handled (applied, or older than the
// stored state).
func gmailEventsHandled(ctx context.Context, addr string) (int, error) {
	v, err := metricSum(ctx, addr, "mailroom_gmail_events_total")
	return int(v), err
}
