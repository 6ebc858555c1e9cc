package dynamodb

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idemkit/consumer"
)

// kind is the DynamoDB type an attribute of the record layout has.
type kind int

const (
	kindS     kind = iota // a string
	kindN                 // an integer
	kindB                 // binary
	kindBool              // a boolean
	kindEntry             // an error: a map of t (an integer) and m (a string)
	kindOlder             // an older error: an entry, or NULL for none
	kindNotes             // operator notes: a list of entries
)

var kindNames = [...]string{kindS: "a string", kindN: "an integer", kindB: "binary", kindBool: "a boolean",
	kindEntry: "a map of t (a number) and m (a string)", kindOlder: "a map of t (a number) and m (a string), or NULL",
	kindNotes: "a list of maps of t (a number) and m (a string)"}

// layout is every attribute of a record item but its partition key, with its
// type (see item.go). Attributes outside it are left alone.
var layout = [...]struct {
	name string
	kind kind
}{
	{"st", kindS}, {"own", kindS}, {"fence", kindN}, {"attempts", kindN}, {"fp", kindB}, {"lease", kindN},
	{"locked", kindBool}, {"cnt", kindBool}, {"res", kindB}, {"dropped", kindS}, {"perm", kindBool}, {"h0", kindEntry},
	{"hs", kindEntry}, {"h1", kindOlder}, {"h2", kindOlder}, {"h3", kindOlder}, {"created", kindN},
	{"updated", kindN}, {attrExpires, kindN}, {"notes", kindNotes},
}

// history is the order of the error history, newest first.
var history = [...]string{"h0", "h1", "h2", "h3"}

// decode reads a record item. Every attribute of the layout that is there must
// have its type, and every attribute the record's state needs must be there;
// the error says what is wrong, for a consumer.CorruptRecordError.
func decode(m map[string]types.AttributeValue) (*item, error) {
	for _, a := range layout {
		if v, ok := m[a.name]; ok && !hasKind(v, a.kind) {
			return nil, fmt.Errorf("attribute %s is %s, not %s", a.name, typeName(v), kindNames[a.kind])
		}
	}
	for _, name := range [...]string{"st", "fence", "attempts", attrExpires} {
		if _, ok := m[name]; !ok {
			return nil, fmt.Errorf("no %s attribute", name)
		}
	}
	it := &item{state: str(m, "st"), owner: str(m, "own"), dropped: str(m, "dropped"),
		locked: boolean(m, "locked"), counted: boolean(m, "cnt"), permanent: boolean(m, "perm")}
	if res, ok := m["res"].(*types.AttributeValueMemberB); ok {
		it.result = res.Value
	}
	if err := it.numbers(m); err != nil {
		return nil, err
	}
	if err := it.checkState(m); err != nil {
		return nil, err
	}
	if fp, ok := m["fp"].(*types.AttributeValueMemberB); ok {
		if len(fp.Value) != len(it.fp) {
			return nil, fmt.Errorf("attribute fp is %d bytes, not %d", len(fp.Value), len(it.fp))
		}
		copy(it.fp[:], fp.Value)
	}
	for _, name := range history {
		if e, ok := m[name].(*types.AttributeValueMemberM); ok { // absent, or NULL: no entry
			sec, _ := strconv.ParseInt(e.Value["t"].(*types.AttributeValueMemberN).Value, 10, 64)
			it.history = append(it.history, consumer.AttemptError{Time: time.Unix(sec, 0), Message: e.Value["m"].(*types.AttributeValueMemberS).Value})
		}
	}
	if l, ok := m["notes"].(*types.AttributeValueMemberL); ok {
		for _, v := range l.Value {
			e := v.(*types.AttributeValueMemberM).Value
			sec, _ := strconv.ParseInt(e["t"].(*types.AttributeValueMemberN).Value, 10, 64)
			it.notes = append(it.notes, consumer.OperatorNote{Time: time.Unix(sec, 0), Text: e["m"].(*types.AttributeValueMemberS).Value})
		}
	}
	return it, nil
}

// numbers reads the integer attributes.
func (it *item) numbers(m map[string]types.AttributeValue) error {
	var attempts int64
	for _, f := range [...]struct {
		name string
		to   *int64
	}{{"fence", &it.fence}, {"attempts", &attempts}, {"lease", &it.lease}, {"created", &it.created},
		{"updated", &it.updated}, {attrExpires, &it.expires}} {
		v, ok := m[f.name].(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("attribute %s is %q, not an integer", f.name, v.Value)
		}
		*f.to = n
	}
	it.attempts = int(attempts)
	return nil
}

// checkState says what the record's state lacks.
func (it *item) checkState(m map[string]types.AttributeValue) error {
	need := func(names ...string) error {
		for _, name := range names {
			if _, ok := m[name]; !ok {
				return fmt.Errorf("a %s record has no %s attribute", it.state, name)
			}
		}
		return nil
	}
	switch it.state {
	case stateStarted:
		return need("own", "lease")
	case stateDone:
		if m["res"] == nil && m["dropped"] == nil {
			return fmt.Errorf("a %s record has neither res nor dropped", it.state)
		}
	case stateFailed, stateRetry, stateForgot:
	default:
		return fmt.Errorf("unknown state %q", it.state)
	}
	return nil
}

// hasKind reports whether v has the type k.
func hasKind(v types.AttributeValue, k kind) bool {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return k == kindS
	case *types.AttributeValueMemberN:
		return k == kindN
	case *types.AttributeValueMemberB:
		return k == kindB
	case *types.AttributeValueMemberBOOL:
		return k == kindBool
	case *types.AttributeValueMemberNULL:
		return k == kindOlder
	case *types.AttributeValueMemberL:
		if k != kindNotes {
			return false
		}
		for _, e := range v.Value {
			if !hasKind(e, kindEntry) {
				return false
			}
		}
		return true
	case *types.AttributeValueMemberM:
		if k != kindEntry && k != kindOlder {
			return false
		}
		t, okT := v.Value["t"].(*types.AttributeValueMemberN)
		_, okM := v.Value["m"].(*types.AttributeValueMemberS)
		if !okT || !okM {
			return false
		}
		_, err := strconv.ParseInt(t.Value, 10, 64)
		return err == nil
	}
	return false
}

// typeName names v's DynamoDB type.
func typeName(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "a string"
	case *types.AttributeValueMemberN:
		return "a number"
	case *types.AttributeValueMemberB:
		return "binary"
	case *types.AttributeValueMemberBOOL:
		return "a boolean"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberM:
		return "a map without t (a number) and m (a string)"
	case *types.AttributeValueMemberL:
		return "a list"
	case *types.AttributeValueMemberSS, *types.AttributeValueMemberNS, *types.AttributeValueMemberBS:
		return "a set"
	}
	return fmt.Sprintf("%T", v)
}

func str(m map[string]types.AttributeValue, name string) string {
	if v, ok := m[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func boolean(m map[string]types.AttributeValue, name string) bool {
	v, ok := m[name].(*types.AttributeValueMemberBOOL)
	return ok && v.Value
}
