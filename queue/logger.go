package queue

import (
	"fmt"
	"log/slog"
	"strings"
)

// asynqLogger gives asynq its Logger on top of slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any) {
	msg := fmt.Sprint(args...)
	if strings.HasPrefix(msg, "revoke task id=") {
		// asynq's note of our asynq.RevokeTask, returned once a task is in
		// the dead letters: the "task dead-lettered" warning says it all.
		a.l.Debug(msg)
		return
	}
	a.l.Warn(msg)
}
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }
