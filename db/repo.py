"""The one way into the store from outside db: connecting and migrating, store faults and their
retry (`db.connection`), and the repository functions: the write side of a sweep (`db.work`),
what the rows say (`db.views`), imports, releases and comparisons (`db.files`), and A/B tests
(`db.ab`).

Repository functions are keyword-only, take a Session and never commit. They return frozen
dataclasses, or ORM rows whose columns are all loaded (a trial, a decision with its retimes),
which `session_scope` leaves readable after its commit.
"""

from db.ab import *  # noqa: F403
from db.connection import *  # noqa: F403
from db.files import *  # noqa: F403
from db.models import TaskState as TaskState  # the task states, for tuner and api
from db.views import *  # noqa: F403
from db.work import *  # noqa: F403
