// Package story is the mail of the rule-save story (DESIGN's first
// problem) that the rules benchmarks and end-to-end tests share: the
// threads of the mailbox and an account whose mirror is seeded as a
// finished full sync leaves it.
package story

import (
	"encoding/json"
	"fmt"
	"slices"

	"mailroom/internal/googlefake"
	"mailroom/queue/google"
	"mailroom/store"
)

// AddThreads fills the mailbox of email with the story's mail: n
// threads (every fifth with a reply from the owner), a third of them from
// GitHub, a third from GitLab, subjects spread over seven repositories.
func AddThreads(fake *googlefake.Server, email string, n int) error {
	for i := range n {
		from := fmt.Sprintf("Person %d <p%d@example.org>", i, i)
		switch i % 3 {
		case 0:
			from = fmt.Sprintf("GitHub <notifications+%d@github.com>", i)
		case 1:
			from = fmt.Sprintf("CI %d <ci%d@gitlab.com>", i, i)
		}
		id, err := fake.Gmail.AddMessage(email, googlefake.Message{From: from, To: email, Subject: fmt.Sprintf("[repo-%d] issue %d", i%7, i), Body: "text"})
		if err != nil {
			return err
		}
		if i%5 == 0 {
			reply := googlefake.Message{ThreadID: id, From: email, To: from, Subject: fmt.Sprintf("Re: [repo-%d] issue %d", i%7, i), Body: "ok"}
			if _, err := fake.Gmail.AddMessage(email, reply); err != nil {
				return err
			}
		}
	}
	return nil
}

// SeedMirror stores a connected account of userID whose mirror is the
// emulated mailbox of email as seeded, as a finished full sync leaves it,
// and returns its id. (A real full sync of thousands of messages waits for
// the Gmail quota for minutes; the rules scenarios start after it.)
func SeedMirror(db *store.DB, userID, email, refresh string, msgs []googlefake.Message, names map[string]string, historyID uint64) (string, error) {
	id := store.NewID()
	tok, err := json.Marshal(google.Token{RefreshToken: refresh})
	if err != nil {
		return "", err
	}
	labels := map[string]string{}
	for lid, name := range names {
		if lid != name {
			labels[lid] = name
		}
	}
	err = db.Update(func(tx *store.Tx) error {
		if err := tx.AccountPut(store.Account{ID: id, UserID: userID, Email: email, Status: store.AccountReady,
			Token: db.Seal(tok, id), HistoryID: historyID}); err != nil {
			return err
		}
		return tx.LabelsReplace(id, labels)
	})
	if err != nil {
		return "", err
	}
	for chunk := range slices.Chunk(msgs, 5000) {
		err := db.Update(func(tx *store.Tx) error {
			for _, m := range chunk {
				sm := store.Message{ID: m.ID}
				sm.MergeFetched(store.Message{ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject,
					Snippet: m.Snippet, Date: m.Date, LabelIDs: m.LabelIDs, HistoryID: m.HistoryID})
				if err := tx.MessagePut(id, sm); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return id, nil
}
