package googlefake_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"mailroom/internal/googlefake"
)

// A label deleted in Gmail leaves every message (a labelsRemoved record
// each), and a modify naming it is refused with 400 "Invalid label".
func TestDeleteLabel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	g := e.srv.Gmail
	dev := must[string](t)(g.CreateLabel(ann, "Dev"))
	ids := must[[]string](t)(g.Generate(ann, 3, 1))
	for _, id := range ids[:2] {
		check(t, g.AddLabels(ann, id, dev))
	}
	start := g.HistoryID(ann)

	check(t, g.DeleteLabel(ann, dev))
	for _, m := range g.Messages(ann) {
		if slices.Contains(m.LabelIDs, dev) {
			t.Errorf("message %s still carries the deleted label", m.ID)
		}
	}
	if _, ok := g.LabelNames(ann)[dev]; ok {
		t.Error("the deleted label is still listed")
	}
	recs, _ := historyOf(t, e, start, nil)
	var kinds []string
	for _, h := range recs {
		kinds = append(kinds, kindOf(h))
	}
	want := []string{"-" + dev + ":" + ids[0], "-" + dev + ":" + ids[1]}
	slices.Sort(want)
	slices.Sort(kinds)
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}

	for name, err := range map[string]error{
		"modify": func() error {
			_, err := e.gmail.Users.Messages.Modify("me", ids[2], &gmail.ModifyMessageRequest{AddLabelIds: []string{dev}}).Do()
			return err
		}(),
		"batchModify": e.gmail.Users.Messages.BatchModify("me", &gmail.BatchModifyMessagesRequest{Ids: ids, RemoveLabelIds: []string{dev}}).Do(),
	} {
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != 400 || gerr.Message != "Invalid label: "+dev {
			t.Errorf("%s with the deleted label: %v, want 400 Invalid label: %s", name, err, dev)
		}
	}
	if err := g.DeleteLabel(ann, dev); !errors.Is(err, googlefake.ErrUnknownLabel) {
		t.Errorf("deleting it again: %v, want ErrUnknownLabel", err)
	}
	again := must[string](t)(g.CreateLabel(ann, "dev"))
	if again == dev {
		t.Errorf("the name made again got the old id %s", dev)
	}
}
