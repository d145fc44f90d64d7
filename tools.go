//go:build tools

package tools

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/chromedp/chromedp"
	_ "github.com/gin-gonic/gin"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/hibiken/asynq"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.etcd.io/bbolt"
	_ "go.uber.org/goleak"
	_ "golang.org/x/crypto/bcrypt"
	_ "golang.org/x/oauth2"
	_ "google.golang.org/api/gmail/v1"
	_ "google.golang.org/api/idtoken"
	_ "google.golang.org/api/sheets/v4"
)
