package google

import (
	"fmt"
	"strings"
)

// Prices is one of Google's Gmail price lists (quota regimes): the units
// each method costs and the units a user may spend a minute
// (developers.google.com/workspace/gmail/api/reference/quota). Which one a
// project pays depends on when it began to use the API, so it is a setting
// (MAILROOM_GMAIL_QUOTA_PRICES). The budget, the adapter, the quota status,
// the metrics, the setup page and the estimates all read the list in force
// from here; nothing else writes a method's price.
type Prices struct {
	// Name is the list's name as the setting takes it: "2026" or "2025".
	Name string
	// UserUnitsPerMinute is the list's per-user limit, the default of
	// MAILROOM_GMAIL_USER_UNITS_PER_MINUTE.
	UserUnitsPerMinute int

	GetProfile   int
	MessagesList int
	// MessagesGet is a messages.get with format metadata (or minimal);
	// MessagesGetBody one with format full, raw or html (the body).
	MessagesGet     int
	MessagesGetBody int
	AttachmentsGet  int
	MessagesTrash   int
	ThreadsGet      int
	ThreadsList     int
	Modify          int
	BatchModify     int
	HistoryList     int
	LabelsList      int
	LabelsCreate    int
	Watch           int
	Stop            int
}

// Price list names.
const (
	// Prices2026 is the list of Cloud projects created on or after May 1,
	// 2026: 6,000 units a user a minute and content reads four times
	// dearer (messages.get 20, threads.get 40). A later copy of Google's
	// page prices a get "20 (60 if format is full, raw or html)": the
	// stricter reading is taken, a body read costs 60.
	Prices2026 = "2026"
	// Prices2025 is the list of projects that used the API between
	// November 2025 and April 2026 and "continue with their previously set
	// usage quotas": 15,000 units a user a minute and the earlier table.
	Prices2025 = "2025"
	// DefaultPrices is the list a new deployment pays.
	DefaultPrices = Prices2026
)

// PriceListNames lists the names PricesFor takes, newest first.
func PriceListNames() []string { return []string{Prices2026, Prices2025} }

// PricesFor returns the price list named (empty: DefaultPrices).
func PricesFor(name string) (Prices, error) {
	switch name {
	case Prices2026, "":
		return Prices{
			Name: Prices2026, UserUnitsPerMinute: 6000,
			GetProfile: 1, MessagesList: 5, MessagesGet: 20, MessagesGetBody: 60, AttachmentsGet: 20,
			MessagesTrash: 20, ThreadsGet: 40, ThreadsList: 10, Modify: 5, BatchModify: 50,
			HistoryList: 2, LabelsList: 1, LabelsCreate: 5, Watch: 100, Stop: 50,
		}, nil
	case Prices2025:
		return Prices{
			Name: Prices2025, UserUnitsPerMinute: 15000,
			GetProfile: 1, MessagesList: 5, MessagesGet: 5, MessagesGetBody: 5, AttachmentsGet: 5,
			MessagesTrash: 5, ThreadsGet: 10, ThreadsList: 10, Modify: 5, BatchModify: 50,
			HistoryList: 2, LabelsList: 1, LabelsCreate: 5, Watch: 100, Stop: 50,
		}, nil
	}
	return Prices{}, fmt.Errorf("google: no Gmail price list %q (want one of %s)", name, strings.Join(PriceListNames(), ", "))
}

// MustPrices is PricesFor for a name known to be good (a constant).
func MustPrices(name string) Prices {
	p, err := PricesFor(name)
	if err != nil {
		panic(err)
	}
	return p
}

// Get is the price of a messages.get, with the body or without.
func (p Prices) Get(withBody bool) int {
	if withBody {
		return p.MessagesGetBody
	}
	return p.MessagesGet
}

// UseThread reports whether n listed messages of a thread are fetched
// with one threads.get rather than a messages.get (metadata) each: where
// it costs no more (one call instead of n at the same price is fewer calls
// in flight). From two messages up at both lists' prices: 40 against 2 x
// 20 ties under 2026's and saves from three; 10 against 2 x 5 under
// 2025's likewise. Never for one message.
func (p Prices) UseThread(n int) bool {
	return n >= 2 && p.ThreadsGet <= n*p.MessagesGet
}
