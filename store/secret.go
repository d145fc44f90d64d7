package store

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeyFileName is the secret key file created in the data dir on first start
// when MAILROOM_SECRET_KEY is not set.
const KeyFileName = "secret.key"

// ParseKey decodes a base64 32-byte key.
func ParseKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not valid base64: %w", err)
	}
	if len(k) != 32 {
		return nil, fmt.Errorf("decodes to %d bytes, want 32", len(k))
	}
	return k, nil
}

func loadOrCreateKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err == nil {
		k, err := ParseKey(string(raw))
		if err != nil {
			return nil, fmt.Errorf("store: key file %s: %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: read key file: %w", err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: create key file: %w", err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: write key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return k, f.Close()
}

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("store: secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal encrypts plain with AES-256-GCM; the nonce is prepended.
func (s *sealer) seal(plain []byte, aad string) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err)
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(aad))
}

func (s *sealer) open(sealed []byte, aad string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("store: sealed secret too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
	if err != nil {
		return nil, fmt.Errorf("store: decrypt secret (wrong MAILROOM_SECRET_KEY?): %w", err)
	}
	return plain, nil
}

// Seal encrypts a secret for storage; aad binds it to its owner (for example
// an account id) so a sealed value cannot be moved to another record.
func (db *DB) Seal(plain []byte, aad string) []byte { return db.sealer.seal(plain, aad) }

// Unseal decrypts what Seal produced.
func (db *DB) Unseal(sealed []byte, aad string) ([]byte, error) {
	return db.sealer.open(sealed, aad)
}
