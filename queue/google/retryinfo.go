package google

import (
	"time"

	"google.golang.org/api/googleapi"
)

// retryHint is the wait a Google error names: a google.rpc.RetryInfo in
// its details ({"@type": "type.googleapis.com/google.rpc.RetryInfo",
// "retryDelay": "30s"}, Google's error model:
// cloud.google.com/apis/design/errors#retryinfo), else its Retry-After
// header, else Gmail's "Retry after <time>" message, else defaultRateWait.
func retryHint(ge *googleapi.Error) time.Duration {
	for _, d := range ge.Details {
		m, ok := d.(map[string]any)
		if !ok || m["@type"] != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		s, _ := m["retryDelay"].(string)
		if wait, err := time.ParseDuration(s); err == nil && wait > 0 {
			return max(wait, time.Second)
		}
	}
	// Gmail's per-user refusal names the time in its message, or in its
	// item's: "User-rate limit exceeded.  Retry after
	// 2026-06-01T12:01:00.000Z" (taers232c/GAMADV-XTD3 issue 337).
	msgs := []string{ge.Message}
	for _, e := range ge.Errors {
		msgs = append(msgs, e.Message)
	}
	for _, m := range msgs {
		if at, ok := retryAfterMessage(m); ok {
			return max(time.Until(at), time.Second)
		}
	}
	return retryAfter(ge.Header)
}
