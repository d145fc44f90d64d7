package bench

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"mailroom/internal/app"
)

// settingsDiff names every setting of cfg that differs from serve's
// defaults (app.Defaults, what app.ParseConfig gives with no flag and no
// environment), as "Field=value" by app.Config field, in field order: what
// a bench note must state. Secrets and paths are named without their
// values; a non-nil override hook is named as set.
func settingsDiff(s *setup) []string {
	def := reflect.ValueOf(app.Defaults()).Elem()
	got := reflect.ValueOf(s.Config).Elem()
	var out []string
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		a, b := got.Field(i), def.Field(i)
		if reflect.DeepEqual(a.Interface(), b.Interface()) {
			continue
		}
		out = append(out, name+"="+settingValue(name, a))
	}
	return append(out, depsDiff(s.deps)...)
}

// depsDiff names the app.Deps a bench sets that no flag reaches.
func depsDiff(d app.Deps) []string {
	var out []string
	for _, set := range []struct {
		name string
		on   bool
	}{
		{"Tasks", len(d.Tasks) > 0}, {"TaskLayout", d.TaskLayout != nil},
		{"GmailQuotaOff", d.GmailQuotaOff}, {"GoogleTransport", d.GoogleTransport != nil},
	} {
		if set.on {
			out = append(out, "Deps."+set.name+" set")
		}
	}
	return out
}

// settingValue prints one setting's value for a note.
func settingValue(name string, v reflect.Value) string {
	switch {
	case strings.Contains(name, "Password"), strings.Contains(name, "Token") && !strings.Contains(name, "URL"),
		strings.Contains(name, "Secret"), strings.HasSuffix(name, "Key"):
		return "(set)"
	case name == "DataDir":
		return "(a fresh temporary folder)"
	case strings.HasSuffix(name, "URL") && strings.HasPrefix(name, "Google"):
		return "(the emulator)"
	}
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v.Interface())
}

// sheetsBenchOverrides names, for a note written by hand (the storage
// scenario), every setting startSheetsBenchApp sets that differs from
// serve's defaults; the Sheets scenarios compute theirs (settingsDiff).
const sheetsBenchOverrides = "the app built by app.New as serve builds it, with a fresh temporary MAILROOM_DATA_DIR, MAILROOM_HTTP_ADDR=127.0.0.1:0, MAILROOM_LOG_LEVEL=error, MAILROOM_API_TOKEN and MAILROOM_ADMIN_PASSWORD set, the Google URLs at the emulator, MAILROOM_GMAIL_POLL_INTERVAL=1h, MAILROOM_TASK_POLL_INTERVAL=10ms and MAILROOM_DELAYED_CHECK_INTERVAL=20ms"

// settingsNote is the note sentence naming the settings of an app (what,
// when a scenario runs more than one) that differ from serve's defaults.
func settingsNote(what string, diff []string) string {
	return what + " built by app.New as serve builds it; settings that differ from serve's defaults (app.Config fields): " + strings.Join(diff, ", ")
}
