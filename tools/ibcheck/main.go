// Command ibcheck is the node preflight that operators run before a job.
package main

func main() {}
