package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/lmlite/lmlite/engine/gguf"
	"github.com/lmlite/lmlite/engine/tokenizer"
)

func init() {
	register("tokenize", "print the token ids of a text (llama-tokenize --ids)", func(args []string) error {
		return runTokenize(args, os.Stdout)
	})
}

func runTokenize(args []string, out io.Writer) error {
	fs := newFlags("tokenize")
	model := fs.String("model", "", "GGUF file (a vocabulary-only file will do)")
	prompt := fs.String("prompt", "", "the text, taken literally (no escapes)")
	file := fs.String("file", "", "read the text from this file, verbatim (a trailing newline is part of it)")
	noBOS := fs.Bool("no-bos", false, "do not add BOS even when the vocabulary asks for it")
	parseSpecial := fs.Bool("parse-special", false, "turn the texts of special tokens (<|im_start|> ...) into those tokens")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	promptSet := false
	fs.Visit(func(f *flag.Flag) { promptSet = promptSet || f.Name == "prompt" })
	switch {
	case *model == "":
		return errors.New("--model is required")
	case promptSet == (*file != ""):
		return errors.New("give exactly one of --prompt and --file")
	}
	text := *prompt
	if *file != "" {
		b, err := os.ReadFile(*file)
		if err != nil {
			return err
		}
		text = string(b)
	}
	f, err := gguf.Open(*model)
	if err != nil {
		return err
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return fmt.Errorf("%s: %w", *model, err)
	}
	ids := tok.Encode(text, tok.AddBOS() && !*noBOS, *parseSpecial)
	_, err = fmt.Fprintln(out, formatIDs(ids))
	return err
}

// formatIDs prints ids as llama-tokenize --ids does: [1, 2, 3].
func formatIDs(ids []int32) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(strconv.Itoa(int(id)))
	}
	sb.WriteByte(']')
	return sb.String()
}
