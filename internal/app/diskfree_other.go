//go:build !unix

package app

import "errors"

// freeBytes is not measured on this system.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("free space is not measured on this system")
}
