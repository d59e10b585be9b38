package main

import "github.com/lmlite/lmlite/engine/worker"

func init() {
	register("worker", "serve models in a child process of `serve` (engine mode workers; not typed by hand)", worker.Main)
}
