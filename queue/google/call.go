package google

import (
	"context"
	"time"
)

// APIs, the label values of mailroom_google_rate_limited_total.
const (
	apiGmail  = "gmail"
	apiSheets = "sheets"
)

// call runs one API call for an account, as every adapter does: after a 401
// the access token is refreshed and fn runs once more (a second 401 is
// reported to the token source as a revoked grant); an idempotent read
// (read set) is also retried at once after a 5xx or a network error, up to
// Config.ReadRetries times with a doubling delay. The error is returned
// unclassified.
func call(ctx context.Context, c *Client, ts *TokenSource, api string, read bool, fn func() error) (err error) {
	defer func() {
		if quotaRefused(err) {
			c.rateLimited.WithLabelValues(api).Inc()
		}
	}()
	err = fn()
	if unauthorized(err) {
		ts.Invalidate()
		if err = fn(); unauthorized(err) {
			ts.reportRevoked(err)
		}
	}
	delay := c.cfg.ReadRetryDelay
	for i := 0; read && i < c.cfg.ReadRetries && transient(ctx, err); i++ {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay *= 2
		err = fn()
	}
	return err
}
