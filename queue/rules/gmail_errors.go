package rules

import (
	"context"

	"mailroom/queue/google"
	"mailroom/queue/googleerr"
)

// queueOpener is the pipeline's boundary with the Google adapter: the
// Gmail it opens, and each of its calls, answer with errors in the queue's
// classes (googleerr.ToQueue), so that the batches, the writer and the
// direct path class them as the queue does. Nil stays nil.
func queueOpener(open GmailOpener) GmailOpener {
	if open == nil {
		return nil
	}
	return func(ctx context.Context, accountID string) (Gmail, error) {
		gm, err := open(ctx, accountID)
		if err != nil {
			return nil, googleerr.ToQueue(err)
		}
		return queueGmail{gm}, nil
	}
}

// queueGmail is a Gmail whose errors are in the queue's classes.
type queueGmail struct{ g Gmail }

func (q queueGmail) Labels(ctx context.Context) ([]google.Label, error) {
	l, err := q.g.Labels(ctx)
	return l, googleerr.ToQueue(err)
}

func (q queueGmail) CreateLabel(ctx context.Context, name string) (google.Label, error) {
	l, err := q.g.CreateLabel(ctx, name)
	return l, googleerr.ToQueue(err)
}

func (q queueGmail) Modify(ctx context.Context, id string, add, remove []string) (uint64, error) {
	h, err := q.g.Modify(ctx, id, add, remove)
	return h, googleerr.ToQueue(err)
}

func (q queueGmail) Profile(ctx context.Context) (string, uint64, error) {
	email, h, err := q.g.Profile(ctx)
	return email, h, googleerr.ToQueue(err)
}

func (q queueGmail) BatchModify(ctx context.Context, ids, add, remove []string) error {
	return googleerr.ToQueue(q.g.BatchModify(ctx, ids, add, remove))
}

func (q queueGmail) GetMessage(ctx context.Context, id string, withBody bool) (google.Message, error) {
	m, err := q.g.GetMessage(ctx, id, withBody)
	return m, googleerr.ToQueue(err)
}
