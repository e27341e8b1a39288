"""Base for django-simple-history models of the aggregates: who made each change, not only why."""

from django.db import models


class ActorHistory(models.Model):
    history_actor = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        abstract = True
