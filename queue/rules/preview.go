package rules

import (
	"errors"
	"fmt"
	"time"

	"mailroom/store"
)

// previewMaxMessages bounds the messages one preview reads.
const previewMaxMessages = 200_000

// Preview is what a draft rule would match among the user's mail.
type Preview struct {
	Threads        int
	MatchedThreads int
	Messages       int
	// Sample holds the newest matching messages, at most the size asked.
	Sample []PreviewMessage
	// BodyFromSnippet is set when a condition reads the body: the mirror
	// keeps no bodies, so the preview matches against Gmail's snippet.
	BodyFromSnippet bool
	// Truncated is set when the user has more mail than a preview reads.
	Truncated bool
}

// PreviewMessage is one matching message of a preview.
type PreviewMessage struct {
	AccountID string
	ID        string
	ThreadID  string
	From      string
	Subject   string
	Date      time.Time
}

// Preview validates a draft rule and counts the threads of the user's
// accounts it matches (a thread matches when one of its messages does),
// with up to sample matching messages, newest first.
func (p *Pipeline) Preview(userID string, s Spec, sample int) (Preview, error) {
	var out Preview
	s.Normalize()
	if err := s.Validate(); err != nil {
		return out, err
	}
	c, err := Compile(s)
	if err != nil {
		return out, err
	}
	for _, cond := range s.Conditions {
		out.BodyFromSnippet = out.BodyFromSnippet || cond.Field == FieldBody || cond.Field == FieldAny
	}
	err = p.db.View(func(tx *store.Tx) error {
		if _, err := tx.UserGet(userID); err != nil {
			return fmt.Errorf("rules: user %s: %w", userID, ErrNotFound)
		}
		accounts, err := tx.Accounts()
		if err != nil {
			return err
		}
		for _, a := range accounts {
			if a.UserID != userID {
				continue
			}
			matched := map[string]bool{}
			threads := map[string]bool{}
			err := tx.EachMessage(a.ID, func(m store.Message) error {
				if !m.Visible() {
					return nil
				}
				if out.Messages == previewMaxMessages {
					out.Truncated = true
					return errStopPreview
				}
				out.Messages++
				threads[m.ThreadID] = true
				msg := Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Snippet}
				if !c.Match(&msg) {
					return nil
				}
				matched[m.ThreadID] = true
				// Message ids grow with time: keep the newest.
				out.Sample = append(out.Sample, PreviewMessage{AccountID: a.ID, ID: m.ID, ThreadID: m.ThreadID, From: m.From, Subject: m.Subject, Date: m.Date})
				if len(out.Sample) > sample {
					out.Sample = out.Sample[1:]
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStopPreview) {
				return err
			}
			out.Threads += len(threads)
			out.MatchedThreads += len(matched)
			if out.Truncated {
				break
			}
		}
		return nil
	})
	for i, j := 0, len(out.Sample)-1; i < j; i, j = i+1, j-1 {
		out.Sample[i], out.Sample[j] = out.Sample[j], out.Sample[i]
	}
	return out, err
}
