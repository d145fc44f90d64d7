package queue

import (
	"context"
	"log/slog"
	"time"

	"mailroom/internal/lifecycle"
)

// Every is a background loop with the app's one lifecycle (Start, and
// lifecycle.Base's Stop): it runs its func once per interval until Stop,
// and logs the errors.
type Every struct {
	lifecycle.Base
	name     string
	interval time.Duration
	log      *slog.Logger
	fn       func(context.Context) error
}

var _ lifecycle.Service = (*Every)(nil)

// NewEvery returns a loop that runs fn every interval; name names it in
// the log.
func NewEvery(name string, interval time.Duration, log *slog.Logger, fn func(context.Context) error) *Every {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Every{name: name, interval: interval, log: log, fn: fn}
}

// Start runs the loop until Stop; the first run is one interval away.
// Stop waits for a run in progress.
func (e *Every) Start(ctx context.Context) error {
	return e.StartLoop(ctx, e.loop)
}

func (e *Every) loop(ctx context.Context) {
	lifecycle.Tick(ctx, e.interval, func(ctx context.Context) {
		if err := e.fn(ctx); err != nil && ctx.Err() == nil {
			e.log.Error(e.name, "err", err)
		}
	})
}
