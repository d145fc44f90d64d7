package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"mailroom/queue"
	"mailroom/store"
)

// debugTasks is the debug:record task type, enabled by --debug-tasks for the
// crash-safety tests and the idle benchmark: each completion appends the
// task id to a file in the data dir.
type debugTasks struct {
	q    *queue.Queue
	db   *store.DB
	mu   sync.Mutex
	file *os.File
}

type debugPayload struct {
	// Fail is "", "retry" (always a retryable error) or "permanent".
	Fail string `json:"fail,omitempty"`
	// SleepMS makes the task take this long.
	SleepMS int `json:"sleepMs,omitempty"`
}

// TypeDebugRecord is the debug task type.
const TypeDebugRecord = "debug:record"

// debugTaskRow is the debug type's row of the task table, present with
// --debug-tasks.
func debugTaskRow(maxRetries int) queue.TaskType {
	return queue.TaskType{Name: TypeDebugRecord, Queue: "debug", Concurrency: 10, MaxRetries: maxRetries, Timeout: time.Minute}
}

// DebugLogName is where completions are recorded, one id per line.
const DebugLogName = "debug-completions.log"

func newDebugTasks(dataDir string, db *store.DB, q *queue.Queue) (*debugTasks, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, DebugLogName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("debug tasks: %w", err)
	}
	return &debugTasks{q: q, db: db, file: f}, nil
}

func (d *debugTasks) handle(ctx context.Context, t *queue.Task) error {
	var p debugPayload
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		return queue.Permanent(fmt.Errorf("debug:record: bad payload: %w", err))
	}
	if p.SleepMS > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
		}
	}
	switch p.Fail {
	case "retry":
		return errors.New("debug:record: asked to fail")
	case "permanent":
		return queue.Permanent(errors.New("debug:record: asked to fail permanently"))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.file.WriteString(t.ID + "\n")
	return err
}

// EnqueueDebug is enqueue for POST /api/v1/debug/tasks.
func (d *debugTasks) EnqueueDebug(n int, fail string, sleepMS int) (int, error) {
	return d.enqueue(n, debugPayload{Fail: fail, SleepMS: sleepMS})
}

// enqueue records n tasks, 1,000 per transaction.
func (d *debugTasks) enqueue(n int, p debugPayload) (int, error) {
	done := 0
	for done < n {
		chunk := min(1000, n-done)
		err := d.db.Update(func(tx *store.Tx) error {
			for range chunk {
				if _, _, err := d.q.Enqueue(tx, TypeDebugRecord, p); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return done, err
		}
		done += chunk
	}
	return done, nil
}

func (d *debugTasks) Close() error { return d.file.Close() }
