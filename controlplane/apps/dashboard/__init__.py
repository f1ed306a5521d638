"""The live web dashboard: server-rendered page shells; data comes from /api/v1/ and ws/live/."""
