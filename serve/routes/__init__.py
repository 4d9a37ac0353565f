"""The grading API's endpoints, one router per concern (assembled by `judgeforge.serve.app`).

- `grading`: POST /v1/grade, /v1/grade/batch, /v1/compare, /v1/compare/batch;
- `ops`: GET /v1/models, /health (the only open route), /metrics.
"""

from judgeforge.serve.routes import grading, ops

ROUTERS = (grading.router, ops.router)

__all__ = ["ROUTERS", "grading", "ops"]
