package main

import (
	"context"
	"errors"
	"io"
)

func benchCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return &usageError{errors.New("bench: not built yet")}
}
