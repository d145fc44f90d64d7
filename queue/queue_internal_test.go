package queue

import (
	"testing"
	"time"
)

// TestNotBefore: a rate-limited wait asynq keeps in whole seconds ends no
// earlier than asked, and at most a second later.
func TestNotBefore(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		now  time.Time
		d    time.Duration
		want time.Duration
	}{
		{base, time.Second, time.Second},
		{base.Add(300 * time.Millisecond), time.Second, 1700 * time.Millisecond},
		{base.Add(999 * time.Millisecond), 10 * time.Millisecond, 1001 * time.Millisecond},
		{base.Add(500 * time.Millisecond), 2500 * time.Millisecond, 2500 * time.Millisecond},
	} {
		got := notBefore(c.now, c.d)
		if got != c.want {
			t.Errorf("notBefore(%s, %s) = %s, want %s", c.now.Format("05.000"), c.d, got, c.want)
		}
		if at := c.now.Add(got); at.Unix() < c.now.Add(c.d).Unix() || at.Before(c.now.Add(c.d)) || at.Truncate(time.Second) != at {
			t.Errorf("notBefore(%s, %s) ends at %s, early or inside a second", c.now.Format("05.000"), c.d, at.Format("05.000"))
		}
	}
}
