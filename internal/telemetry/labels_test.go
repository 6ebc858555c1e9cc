package telemetry

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/consumer"
)

// The table in LabelValues' doc comment is the vocabulary LabelValues returns.
func TestLabelValuesAreDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "labels.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "LabelValues" {
			doc = fn.Doc.Text()
		}
	}
	documented := map[string][]string{}
	label, inTable := "", false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "\t-------"):
			inTable = true
			continue
		case !inTable:
			continue
		case !strings.HasPrefix(line, "\t"):
			inTable = false
			continue
		}
		fields := strings.Fields(line)
		if !strings.HasPrefix(line, "\t ") { // a new label; else its values go on
			label, fields = fields[0], fields[1:]
		}
		documented[label] = append(documented[label], fields...)
	}
	if got := LabelValues(); fmt.Sprint(got) != fmt.Sprint(documented) {
		t.Fatalf("LabelValues() = %v\nits doc's table says %v", got, documented)
	}
}

// Every value of every label is lower case, and no value is spelled two ways.
func TestLabelValuesAreOneSpelling(t *testing.T) {
	for label, values := range LabelValues() {
		for _, v := range values {
			if v != strings.ToLower(v) || strings.Contains(v, "-") {
				t.Errorf("%s=%q: write label values in lower case with underscores", label, v)
			}
		}
	}
	vocab := LabelValues()
	for _, c := range []struct{ label, got string }{
		{"outcome", OutcomeLabel(consumer.Success)},
		{"outcome", OutcomeLabel(consumer.Duplicate)},
		{"outcome", OutcomeLabel(consumer.InProgress)},
		{"outcome", OutcomeLabel(consumer.Error)},
		{"kind", KindLabel(consumer.DeadLetterKind(consumer.Permanent(errors.New("declined"))))},
		{"kind", KindLabel("NO_KEY")},
		{"kind", KindLabel(consumer.DeadLetterKind(nil))},
		{"kind", KindLabel("")},
	} {
		if !slices.Contains(vocab[c.label], c.got) {
			t.Errorf("%s=%q is not in the vocabulary %v", c.label, c.got, vocab[c.label])
		}
	}
	if k := KindLabel(consumer.DeadLetterKind(consumer.Permanent(errors.New("declined")))); k != consumer.KindPermanent {
		t.Errorf("a dead-lettered permanent failure is labelled kind=%q, an outcome's kind=%q", k, consumer.KindPermanent)
	}
	if k := KindLabel("SOMETHING_NEW"); k != "unknown" {
		t.Errorf("an unknown kind is labelled %q, want unknown", k)
	}
}

// What a message is refused with for good is dead_letter where the source has
// a dead-letter destination, reject where it has none.
func TestActionLabel(t *testing.T) {
	for _, c := range []struct {
		source string
		action consumer.Action
		want   string
	}{
		{consumer.SourceKafka, consumer.DeadLetter, "dead_letter"},
		{consumer.SourceAMQP, consumer.DeadLetter, "dead_letter"},
		{consumer.SourceExecute, consumer.DeadLetter, "dead_letter"},
		{consumer.SourceHTTP, consumer.DeadLetter, "reject"},
		{consumer.SourceReplay, consumer.DeadLetter, "reject"},
		{consumer.SourceHTTP, consumer.Ack, "ack"},
		{consumer.SourceHTTP, consumer.Wait, "wait"},
		{consumer.SourceKafka, consumer.Retry, "retry"},
	} {
		if got := ActionLabel(c.source, c.action); got != c.want {
			t.Errorf("ActionLabel(%q, %v) = %q, want %q", c.source, c.action, got, c.want)
		}
	}
}
