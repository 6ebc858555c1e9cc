package snippets

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// snippet is one ```go block of a document.
type snippet struct {
	doc  string // path relative to the repository root
	line int    // the line of its first line of code
	src  string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.doc, s.line) }

// Every Go snippet of the documentation compiles and passes go vet, with the
// helper names it uses declared by the prelude.
func TestSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every snippet with the go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	var all []snippet
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		s, err := extract(d, rel)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, s...)
	}
	if len(all) == 0 {
		t.Fatal("no ```go block found in README.md: is the test looking in the right place?")
	}
	byModule := map[string]map[string]string{} // module dir -> package dir -> files
	type built struct {
		module, dir string
		files       map[string]string
	}
	var pkgs []built
	for i, s := range all {
		files, module, err := wrap(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		dir := fmt.Sprintf("s%02d_%s_%d", i, strings.NewReplacer("/", "_", ".", "_").Replace(s.doc), s.line)
		if byModule[module] == nil {
			byModule[module] = map[string]string{}
		}
		byModule[module][dir] = s.String()
		pkgs = append(pkgs, built{module: module, dir: dir, files: files})
	}
	if t.Failed() {
		return
	}
	tmp := map[string]string{}
	for module := range byModule {
		d, err := os.MkdirTemp(filepath.Join(root, module), "_snippets")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		tmp[module] = d
	}
	for _, p := range pkgs {
		dir := filepath.Join(tmp[p.module], p.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range p.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	modulesUsed := make([]string, 0, len(byModule))
	for m := range byModule {
		modulesUsed = append(modulesUsed, m)
	}
	sort.Strings(modulesUsed)
	for _, module := range modulesUsed {
		var args []string
		for dir := range byModule[module] {
			args = append(args, "./"+filepath.Join(filepath.Base(tmp[module]), dir))
		}
		sort.Strings(args)
		for _, tool := range [][]string{{"build", "-o", os.DevNull}, {"vet"}} {
			cmd := exec.Command("go", append(tool, args...)...)
			cmd.Dir = filepath.Join(root, module)
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("go %s in module %q (the snippets %v): %v\n%s", tool[0], module, values(byModule[module]), err, out)
			}
		}
		if !t.Failed() {
			t.Logf("module %q: %d snippets built and vetted: %v", module, len(args), values(byModule[module]))
		}
	}
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// extract returns the ```go blocks of the document at path (named rel).
func extract(path, rel string) ([]snippet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []snippet
	var cur *snippet
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur, lines = &snippet{doc: rel, line: n + 1}, nil
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.src = strings.Join(lines, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, l)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: the ```go block opened at line %d is not closed", rel, cur.line-1)
	}
	return out, sc.Err()
}

// wrap turns s into the files of a package (snippet.go and prelude.go) and names
// the module to build it in.
func wrap(s snippet) (files map[string]string, module string, err error) {
	directive := fmt.Sprintf("//line %s:%d\n", s.doc, s.line)
	fset := token.NewFileSet()
	var body string
	var f *ast.File
	if df, derr := parser.ParseFile(fset, "", "package snippet\n"+s.src, 0); derr == nil && len(df.Decls) > 0 {
		body, f = directive+s.src, df // declarations: a file as it stands
	} else {
		const head = "package snippet\n\nfunc snippet(ctx context.Context) error {\n"
		wf, werr := parser.ParseFile(fset, "", head+s.src+"}\n", 0)
		if werr != nil {
			return nil, "", fmt.Errorf("neither declarations (%v) nor statements (%v): a snippet is one or the other", derr, werr)
		}
		body = "func snippet(ctx context.Context) error {\n" + directive + readDeclared(fset, wf, s, strings.Count(head, "\n")) + "}\n"
		f = wf
	}
	need := map[string]bool{}  // packages snippet.go imports
	pneed := map[string]bool{} // packages prelude.go imports
	prel := map[string]bool{}  // prelude entries
	var missing []string
	var visit func(names []*ast.Ident, own bool)
	visit = func(names []*ast.Ident, own bool) {
		for _, id := range names {
			name := id.Name
			switch {
			case types.Universe.Lookup(name) != nil, f.Scope.Lookup(name) != nil: // predeclared, or the snippet's own
			case imports[name] != "" && own:
				need[name] = true
			case imports[name] != "":
				pneed[name] = true
			case prelude[name] != "":
				if prel[name] {
					continue
				}
				prel[name] = true
				pf, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+prelude[name], 0)
				if err != nil {
					panic(fmt.Sprintf("prelude entry %q: %v", name, err))
				}
				visit(pf.Unresolved, false)
			default:
				if !slices.Contains(missing, name) {
					missing = append(missing, name)
				}
			}
		}
	}
	visit(f.Unresolved, true)
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("uses %s, which neither the snippet nor the prelude (prelude_test.go) declares: define it in the snippet, or add it to the prelude", strings.Join(missing, ", "))
	}
	module = "."
	for _, set := range []map[string]bool{need, pneed} {
		for name := range set {
			if m := moduleOf(imports[name]); m != "." {
				if module != "." && module != m {
					return nil, "", fmt.Errorf("imports packages of two modules (%s and %s): split the snippet", module, m)
				}
				module = m
			}
		}
	}
	importBlock := importDecl(need)
	files = map[string]string{"snippet.go": "package snippet\n\n" + importBlock + body}
	var pnames []string
	for name := range prel {
		pnames = append(pnames, name)
	}
	sort.Strings(pnames)
	if len(pnames) > 0 {
		var b strings.Builder
		b.WriteString("// Code generated by the snippets test: the names the snippet uses.\n\npackage snippet\n\n")
		b.WriteString(importDecl(pneed))
		for _, name := range pnames {
			b.WriteString(prelude[name] + "\n\n")
		}
		files["prelude.go"] = b.String()
	}
	return files, module, nil
}

// readDeclared returns the statements of the wrapped snippet (its lines start
// after skip lines of wrapper) with a read of every variable a top-level
// statement declares, right after it, and a final return when the snippet has
// none. A //line directive after each added line keeps positions on the
// document's lines.
func readDeclared(fset *token.FileSet, f *ast.File, s snippet, skip int) string {
	lines := strings.Split(strings.TrimSuffix(s.src, "\n"), "\n")
	after := map[int][]string{} // snippet line index -> names to read after it
	fd := f.Decls[0].(*ast.FuncDecl)
	stmts := fd.Body.List
	for _, st := range stmts {
		var names []string
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok && id.Name != "_" {
						names = append(names, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						if id.Name != "_" {
							names = append(names, id.Name)
						}
					}
				}
			}
		}
		if len(names) > 0 {
			end := fset.Position(st.End()).Line - skip - 1
			after[end] = append(after[end], names...)
		}
	}
	var b strings.Builder
	for i, l := range lines {
		b.WriteString(l + "\n")
		if names := after[i]; len(names) > 0 {
			for _, n := range names {
				b.WriteString("_ = " + n + "\n")
			}
			fmt.Fprintf(&b, "//line %s:%d\n", s.doc, s.line+i+1)
		}
	}
	if len(stmts) == 0 {
		b.WriteString("return nil\n")
	} else if _, ok := stmts[len(stmts)-1].(*ast.ReturnStmt); !ok {
		b.WriteString("return nil\n")
	}
	return b.String()
}

// importDecl is the import declaration of the packages names.
func importDecl(names map[string]bool) string {
	if len(names) == 0 {
		return ""
	}
	var specs []string
	for name := range names {
		specs = append(specs, fmt.Sprintf("%s %q", name, imports[name]))
	}
	sort.Strings(specs)
	return "import (\n\t" + strings.Join(specs, "\n\t") + "\n)\n\n"
}

// moduleOf names the module whose go.mod requires import path p.
func moduleOf(p string) string {
	best, module := "", "."
	for prefix, m := range modules {
		if (p == prefix || strings.HasPrefix(p, prefix+"/")) && len(prefix) > len(best) {
			best, module = prefix, m
		}
	}
	return module
}
