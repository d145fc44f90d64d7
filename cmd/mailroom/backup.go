package main

import (
	"context"
	"errors"
	"io"
)

func backupCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return &usageError{errors.New("backup: not built yet")}
}
