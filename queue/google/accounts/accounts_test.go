package accounts_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/store"
	"mailroom/store/storetest"
)

// connected stores a ready account of email holding refresh, sealed by the
// service, and returns its id.
func connected(t *testing.T, db *store.DB, s *accounts.Service, email, refresh string) string {
	t.Helper()
	id := store.NewID()
	sealed, err := s.Seal(id, google.Token{RefreshToken: refresh})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		u, err := tx.UserCreate(email, "")
		if err != nil {
			return err
		}
		return tx.AccountPut(store.Account{ID: id, UserID: u.ID, Email: email, Status: store.AccountReady, Token: sealed})
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAccountsServiceSharesOneConnectionPerAccount(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	db := storetest.Open(t)
	s := newService(t, db, fake)
	ctx := context.Background()

	if _, err := s.Gmail(ctx, "nope"); !google.IsPermanent(err) || !errors.Is(err, accounts.ErrAccountGone) {
		t.Fatalf("an unknown account: %v, want a permanent ErrAccountGone", err)
	}

	const email = "ann@example.com"
	id := connected(t, db, s, email, fake.AddAccount(email))
	book, err := fake.Sheets.CreateSpreadsheet(email, "Sign-ups")
	if err != nil {
		t.Fatal(err)
	}
	g1, err := s.Gmail(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := g1.Profile(ctx); err != nil || got != email {
		t.Fatalf("profile: %q, %v", got, err)
	}
	g2, _ := s.Gmail(ctx, id)
	sh1, err := s.Sheets(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sh2, _ := s.Sheets(ctx, id)
	if g1 != g2 || sh1 != sh2 {
		t.Fatal("the account's clients were made again; want them kept")
	}
	if _, err := sh1.Tabs(ctx, book); err != nil {
		t.Fatalf("sheets through the shared token: %v", err)
	}

	// Forgotten (reconnected or deleted): made afresh.
	s.Forget(id)
	if g3, err := s.Gmail(ctx, id); err != nil || g3 == g1 {
		t.Fatalf("after Forget: %p (was %p), %v", g3, g1, err)
	}
}

func TestAccountsServiceRevokedGrantPutsTheAccountInError(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	db := storetest.Open(t)
	s := newService(t, db, fake)
	ctx := context.Background()
	const email = "bob@example.com"
	id := connected(t, db, s, email, fake.AddAccount(email))
	fake.RevokeRefreshToken(email)

	g, err := s.Gmail(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Profile(ctx); err == nil {
		t.Fatal("a call with a revoked grant succeeded")
	}
	var acc store.Account
	if err := db.View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(id); return err }); err != nil {
		t.Fatal(err)
	}
	if acc.Status != store.AccountError || acc.StatusReason == "" {
		t.Fatalf("account after the revoked grant: status %q, reason %q; want error with what to do", acc.Status, acc.StatusReason)
	}
	if _, err := s.Sheets(ctx, id); !google.IsPermanent(err) || !errors.Is(err, google.ErrRevoked) {
		t.Fatalf("an account in error: %v, want a permanent ErrRevoked", err)
	}
}

// newService builds the service over db and the emulator.
func newService(t *testing.T, db *store.DB, fake *googlefake.Server) *accounts.Service {
	t.Helper()
	s, err := accounts.New(accounts.Config{}, accounts.Deps{DB: db, Google: google.New(google.Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), HTTPClient: &http.Client{Timeout: 10 * time.Second}})})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
