package googlefake

import (
	"strings"
	"time"
)

// DeleteLabel deletes the user label id of the mailbox of email, as a
// person deleting it in Gmail does (labels.delete): the label goes off
// every message that carries it, one labelsRemoved history record each,
// and from then on a messages.modify or batchModify naming the id is
// refused with 400 "Invalid label: <id>", as Gmail refuses it.
// ErrUnknownLabel when there is no such user label.
func (g *Gmail) DeleteLabel(email, id string) error {
	return g.mutate(email, func(b *mailbox, now time.Time) error {
		l := b.labels[id]
		if l == nil {
			return labelError{id}
		}
		for _, m := range b.order {
			if err := b.modify(g.s, now, m.id, nil, []string{id}); err != nil {
				return err
			}
		}
		delete(b.labels, id)
		delete(b.labelByName, strings.ToLower(l.name))
		return nil
	})
}
