"""The paper's experiments, the preconditioner comparison, their figures and the
``ddops`` command."""
