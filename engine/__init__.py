"""COPE's pure computation: model shapes, routing traces, the Policy Matrix, replay
and cost models. Imports numpy and the standard library only (no torch, no textual)."""
