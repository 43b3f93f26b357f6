"""Client media uuids checked against their content in the API server.

Carried from the release :data:`mmobs.releases.FIRST_PROVEN` names for ``uuid_checks``; below
it the plugin declines the feature with one line naming the release.
"""
