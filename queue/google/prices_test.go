package google

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/googlefake"
	"mailroom/queue/broker/brokertest"
)

// The adapter charges each call at the price list in force, the budget's
// limit defaults to the list's, the metric counts by it, and the emulator
// set to the same list counts the same units: for both lists.
func TestGmailChargesThePriceListInForce(t *testing.T) {
	for _, c := range []struct {
		prices               string
		userUnits            int
		get, body, thread    int
		listedThenReadUnits  int
		emulatorDefaultMatch bool
	}{
		{Prices2026, 6000, 20, 60, 40, 5 + 20 + 60 + 40, true},
		{Prices2025, 15000, 5, 5, 10, 5 + 5 + 5 + 10, false},
	} {
		t.Run(c.prices, func(t *testing.T) {
			ctx := WithPriority(context.Background(), PriorityLive)
			opts := googlefake.Options{GmailQuotaPrices: c.prices}
			if c.emulatorDefaultMatch {
				opts.GmailQuotaPrices = "" // the emulator's default is the app's
			}
			fake := googlefake.StartForTest(t, opts)
			const ann = "ann@example.com"
			refresh := fake.AddAccount(ann)
			id, err := fake.Gmail.AddMessage(ann, googlefake.Message{From: "a@example.com", To: ann, Subject: "s", Body: "b"})
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			bud, err := NewBudget(BudgetConfig{Prices: MustPrices(c.prices), Registerer: reg}, brokertest.Embedded(t).Client())
			if err != nil {
				t.Fatal(err)
			}
			if bud.Config().UserUnits != c.userUnits {
				t.Errorf("the budget's per-user limit is %d, want the list's %d", bud.Config().UserUnits, c.userUnits)
			}
			cl := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: bud})
			if cl.Prices().Name != c.prices {
				t.Errorf("the client charges the %s list, want %s", cl.Prices().Name, c.prices)
			}
			gm, _ := cl.Gmail(ctx, "acc-1", cl.TokenSource(Token{RefreshToken: refresh}, nil))
			refs, _, err := gm.ListMessages(ctx, "", 10)
			if err != nil || len(refs) != 1 {
				t.Fatalf("list: %v, %v", refs, err)
			}
			if _, err := gm.GetMessage(ctx, id, false); err != nil {
				t.Fatal(err)
			}
			if _, err := gm.GetMessage(ctx, id, true); err != nil {
				t.Fatal(err)
			}
			if _, err := gm.GetThread(ctx, refs[0].ThreadID); err != nil {
				t.Fatal(err)
			}
			want := c.listedThenReadUnits
			u, err := bud.Usage(ctx, "acc-1")
			if err != nil {
				t.Fatal(err)
			}
			if u.Used != want {
				t.Errorf("the budget spent %d units, want %d", u.Used, want)
			}
			if got := gathered(t, reg, "mailroom_gmail_quota_units_total"); got != float64(want) {
				t.Errorf("mailroom_gmail_quota_units_total = %v, want %d", got, want)
			}
			if got := fake.Gmail.QuotaUnits(ann); got != want {
				t.Errorf("the emulator at the same prices counted %d units, want %d", got, want)
			}
		})
	}
}

// The emulator's tables are written from Google's pages on their own; the
// app's price lists must say the same, method by method.
func TestPricesAgreeWithTheEmulator(t *testing.T) {
	for _, name := range PriceListNames() {
		fake := googlefake.New(googlefake.Options{GmailQuotaPrices: name})
		p := MustPrices(name)
		for method, units := range map[string]int{
			googlefake.MethodGetProfile: p.GetProfile, googlefake.MethodMessagesList: p.MessagesList,
			googlefake.MethodMessagesModify: p.Modify, googlefake.MethodMessagesBatchModify: p.BatchModify,
			googlefake.MethodMessagesTrash: p.MessagesTrash, googlefake.MethodThreadsGet: p.ThreadsGet,
			googlefake.MethodHistoryList: p.HistoryList, googlefake.MethodLabelsList: p.LabelsList,
			googlefake.MethodLabelsCreate: p.LabelsCreate, googlefake.MethodWatch: p.Watch, googlefake.MethodStop: p.Stop,
		} {
			if got := fake.Gmail.Price(method, ""); got != units {
				t.Errorf("%s: %s costs %d units in the emulator, %d in the app", name, method, got, units)
			}
		}
		if got := fake.Gmail.Price(googlefake.MethodMessagesGet, "metadata"); got != p.MessagesGet {
			t.Errorf("%s: a metadata get costs %d in the emulator, %d in the app", name, got, p.MessagesGet)
		}
		for _, format := range []string{"full", "raw", "html"} {
			if got := fake.Gmail.Price(googlefake.MethodMessagesGet, format); got != p.MessagesGetBody {
				t.Errorf("%s: a %s get costs %d in the emulator, %d in the app", name, format, got, p.MessagesGetBody)
			}
		}
	}
	if _, err := PricesFor("2024"); err == nil {
		t.Error("PricesFor took an unknown list")
	}
	if p, _ := PricesFor(""); p.Name != DefaultPrices || DefaultPrices != Prices2026 {
		t.Errorf("the default list is %q, want 2026", p.Name)
	}
}
