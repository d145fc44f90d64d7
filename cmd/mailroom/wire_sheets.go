package main

import "context"

// wireSheets builds the sheets pipeline: its handlers in the task table, its loops
// and its web extension.
func (a *app) wireSheets(ctx context.Context) error {
	return nil
}
