package queue

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxQuoted is the most characters of what a receiver, Google or a user
// wrote that an alert quotes.
const maxQuoted = 200

// maxAlertText bounds an alert's text: Discord's content limit is 2,000.
const maxAlertText = 1900

// chatMessage is an alert as posted: both Discord ("content") and Slack
// ("text") take it, and each ignores the other's fields.
type chatMessage struct {
	Content         string          `json:"content"`
	Text            string          `json:"text"`
	AllowedMentions allowedMentions `json:"allowed_mentions"`
}

// allowedMentions is Discord's: an empty parse list pings no one, whatever
// the content says.
type allowedMentions struct {
	Parse []string `json:"parse"`
}

// slackEscaper escapes the three characters Slack's message formatting
// reserves, so that <!channel>, <@U…> and <https://…|links> in the text
// are shown as written and do nothing.
var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// chatBody is the body of every alert the Alerter posts (dead letters,
// notices, raised alerts, the test): nothing in text can mention anyone.
// Discord gets allowed_mentions with nothing to parse, Slack gets the text
// escaped, and both get @everyone, @here and @channel with a zero-width
// space after the @.
func chatBody(text string) []byte {
	text = Truncate(defuseMentions(text), maxAlertText)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // valid JSON either way; this way it reads as sent
	_ = enc.Encode(chatMessage{Content: text, Text: slackEscaper.Replace(text), AllowedMentions: allowedMentions{Parse: []string{}}})
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// broadcastWords are the mentions that reach a whole channel or server.
var broadcastWords = []string{"everyone", "here", "channel"}

// defuseMentions puts a zero-width space after the @ of @everyone, @here
// and @channel (in any case), so that no chat reads them as mentions.
func defuseMentions(text string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(text, '@')
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i+1])
		text = text[i+1:]
		for _, w := range broadcastWords {
			if len(text) >= len(w) && strings.EqualFold(text[:len(w)], w) {
				b.WriteString("\u200b")
				break
			}
		}
	}
}

// Snippet makes text that someone else wrote (a receiver's answer, an
// error from Google) fit to store and show: control and formatting
// characters (line breaks, bidi overrides) become spaces, runs of spaces
// one, and it is cut to n bytes at a character's start.
func Snippet(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
	return Truncate(strings.Join(strings.Fields(s), " "), n)
}

// Quote sets what someone else wrote in an alert: a Snippet of at most
// 200 bytes in a code span, where no link, markdown or mention renders
// (a backtick in it becomes a quote, so the span cannot be closed early).
func Quote(s string) string {
	s = Snippet(strings.ReplaceAll(s, "`", "'"), maxQuoted)
	if s == "" {
		return "(no text)"
	}
	return "`" + s + "`"
}
